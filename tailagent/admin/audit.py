"""`tailagent audit`: every permission decision on an agent's tool calls, who made it
and when, read from the store itself (no server needs to run), oldest first.

An audit row holds what callers and agents wrote (a tool's input, a reason, a device's
name): each cell is text, never rich markup, with its control characters escaped.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import asdict
from datetime import UTC, datetime

from rich import box
from rich.table import Table

from tailagent.admin.tables import cells, console
from tailagent.cost.since import parse_since
from tailagent.output.visible import json_line
from tailagent.store.audit import AuditEntry, AuditLog
from tailagent.store.database import StoreUnavailable, open_database, redacted, sqlite_path


def _local_time(stamp: str, short: bool = False) -> str:
    """A stored UTC time as this box's local time: with its offset, or `short` for a
    terminal's narrow column (`17:42` today, `12-02 17:42` this year)."""
    try:
        moment = datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    moment = moment.astimezone()
    if not short:
        return moment.isoformat(timespec="seconds")
    now = datetime.now().astimezone()
    if moment.date() == now.date():
        return moment.strftime("%H:%M")
    return moment.strftime("%m-%d %H:%M" if moment.year == now.year else "%Y-%m-%d %H:%M")


def _audit_table() -> Table:
    """The audit's columns, fitted to the terminal by rich's layout: the time, the
    decision, the tool and the task whole; the words (input, who, why) share what is
    left and wrap."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_lines=True)
    table.add_column("when", no_wrap=True)
    table.add_column("decision", no_wrap=True)
    table.add_column("tool", no_wrap=True, max_width=16, overflow="ellipsis")
    table.add_column("input", ratio=3, min_width=10, overflow="fold")
    table.add_column("answered by", ratio=2, min_width=10, overflow="fold")
    table.add_column("reason", ratio=3, min_width=10, overflow="fold")
    table.add_column("task", no_wrap=True)
    return table


def _no_database_yet(store_url: str) -> bool:
    """A SQLite store no server has made yet: nothing to read, and nothing to create."""
    path = sqlite_path(store_url)
    return path is not None and not path.exists()


async def _read_audit(store_url: str, since: datetime | None) -> list[AuditEntry]:
    database = open_database(store_url)
    try:
        return await AuditLog(database).read(since)
    except database.errors as exc:
        raise StoreUnavailable(str(exc)) from None
    finally:
        await database.aclose()


def audit_command(args: argparse.Namespace, store_url: str) -> int:
    try:
        since = parse_since(args.since) if args.since else None
    except ValueError:
        print(f"tailagent: --since wants an ISO time or an age like 12h, not {args.since!r}")
        return 2
    try:
        entries = [] if _no_database_yet(store_url) else asyncio.run(_read_audit(store_url, since))
    except (OSError, StoreUnavailable) as exc:
        print(f"tailagent: cannot read the audit log from {redacted(store_url)}: {exc}")
        return 1
    if args.json:
        for entry in entries:
            print(json_line(asdict(entry)))
        return 0
    table, short = _audit_table(), sys.stdout.isatty()
    for e in entries:
        when, decision, *rest = cells(
            _local_time(e.at, short), e.decision, e.tool, e.input, e.answered_by, e.reason,
            e.task_id[:8],
        )  # fmt: skip
        decision.stylize("green" if e.decision == "allow" else "red")
        table.add_row(when, decision, *rest)
    console().print(table)
    return 0
