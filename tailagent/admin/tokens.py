"""`tailagent token`: the bearer tokens of callers that are not on the tailnet (CI, a
script), added, listed and revoked on this box's state dir. A token is shown once, when
it is added; only its hash is kept (access/tokens.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.table import Table

from tailagent.access.tokens import TokenStore
from tailagent.admin.tables import cells, console
from tailagent.output.visible import json_line


def token_command(args: argparse.Namespace, state_dir: Path) -> int:
    store = TokenStore(state_dir)
    if args.action == "add":
        try:
            token = store.add(args.name, tuple(args.roles or ["caller"]))
        except ValueError as exc:
            print(f"tailagent: {exc}", file=sys.stderr)
            return 1
        print(token)  # alone on stdout, so `TOKEN=$(tailagent token add ci)` works
        roles = ", ".join(args.roles or ["caller"])
        print(
            f"token {args.name!r} ({roles}) is shown this once (only its hash is kept). Send it "
            "as `Authorization: Bearer <token>`, or `tailagent call --token <token>` "
            "(or $TAILAGENT_TOKEN)",
            file=sys.stderr,
        )
        return 0
    if args.action == "revoke":
        try:
            store.revoke(args.name)
        except KeyError as exc:
            print(f"tailagent: {exc.args[0]}", file=sys.stderr)
            return 1
        print(f"revoked {args.name}", file=sys.stderr)
        return 0
    if args.json:
        for info in store.list():
            row = {"name": info.name, "roles": list(info.roles), "created": info.created}
            print(json_line(row))
        return 0
    table = Table("name", "roles", "created")
    for info in store.list():
        table.add_row(*cells(info.name, ", ".join(info.roles), info.created))
    console().print(table)
    return 0
