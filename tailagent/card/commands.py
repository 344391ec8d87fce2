"""`tailagent keys`, `tailagent card` and `tailagent peers`.

A card is what its agent says of itself, and a peer's name is the tailnet's: both are
shown as text (rich.text.Text, never markup), with their control characters escaped.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tailagent.card.keys import KeyStore, SigningKey
from tailagent.card.peers import discover
from tailagent.card.verify import KnownAgents, fetch_card, verify_card
from tailagent.config import is_loopback_url
from tailagent.output.visible import visible
from tailagent.tailnet.localapi import (
    START_TAILSCALED,
    LocalAPI,
    LocalAPIUnavailable,
    find_socket,
)
from tailagent.tailnet.tsnet.client import node_without_tailscaled, proxy_for


def _show_key(key: SigningKey | None, store: KeyStore, as_json: bool) -> None:
    if as_json:
        alg, kid = (key.alg, key.kid) if key is not None else (None, None)
        print(json.dumps({"alg": alg, "kid": kid, "path": str(store.path)}))
    elif key is None:
        print(f"no signing key in {store.path.parent} yet: the server makes one at its first "
              "start (or `tailagent keys init`)")  # fmt: skip
    else:
        print(f"{key.alg} key {key.kid} in {store.path}")


def keys_command(args: argparse.Namespace, state_dir: Path) -> int:
    store = KeyStore(state_dir)
    as_json = getattr(args, "json", False)
    if args.action in (None, "show"):
        _show_key(store.current() if store.exists() else None, store, as_json)
        return 0
    try:
        key = store.init(args.alg) if args.action == "init" else store.rotate(args.alg)
    except FileExistsError:
        current = store.current()
        other = "EdDSA" if current.alg == "ES256" else "ES256"
        print(
            f"tailagent: a signing key ({current.alg}, {current.kid}) already exists in "
            f"{store.path}: the server makes one at its first start, and `keys init` (its "
            "--alg) applies only before that. `tailagent keys rotate` replaces it "
            f"(`--alg {other}` for the other type)",
            file=sys.stderr,
        )
        return 1
    _show_key(key, store, as_json)
    if args.action == "rotate":
        print(
            "The previous key stays in the JWKS for 7 days. Clients elsewhere that pinned it "
            "(`tailagent card URL --trust`) now see the card as INVALID: not signed by the "
            f"key pinned; once you have told them the new kid ({key.kid}), they run "
            "`tailagent card URL --trust` again. This box's own CLI follows by itself.",
            file=sys.stderr,
        )
    return 0


def card_url(text: str) -> str:
    """The agent's URL as given, or for HOST:PORT alone, with the scheme it is served
    with: http on this box (the server's own listener), https elsewhere (the tailnet's
    `tailscale serve`)."""
    if "://" in text:
        return text
    return ("http://" if is_loopback_url(f"http://{text}") else "https://") + text


async def _card(args: argparse.Namespace) -> int:
    known, url = KnownAgents(), card_url(args.url)
    proxy = proxy_for(url, args.state_dir)
    async with httpx.AsyncClient(timeout=10, proxy=proxy) as http:
        try:
            card = await fetch_card(url, http)
        except (httpx.HTTPError, ValueError) as exc:
            shown = visible(f"tailagent: cannot fetch the card of {url}: {exc}")
            print(shown, file=sys.stderr)
            return 2
        # --trust (re-)pins what the card's own signing key, from its jku, verifies.
        pinned = None if args.trust else known.get(url)
        verdict = await verify_card(card, url, http, pinned)
    if args.trust and verdict.valid and verdict.jwk is not None:
        known.pin(url, verdict.jwk)
        verdict = type(verdict)("valid (pinned)", verdict.jwk)
    if args.json:
        print(json.dumps({"url": url, "card": card, "signature": verdict.status}))
        return 0 if verdict.valid else 1
    console = Console(highlight=False, soft_wrap=True)
    interfaces = ", ".join(
        f"{i.get('protocolBinding')} {i.get('protocolVersion')} {i.get('url')}"
        for i in card.get("supportedInterfaces") or []
    )
    name, version = str(card.get("name", "?")), str(card.get("version", ""))
    console.print(Text.assemble((visible(name), "bold"), visible(f" {version}")))
    skills = card.get("skills") or []
    lines = [
        f"  {card.get('description', '')}",
        f"  owner node: {(card.get('provider') or {}).get('url', '?')}",
        f"  interfaces: {interfaces}",
        *(f"  skill: {s.get('name')}: {s.get('description', '')}" for s in skills),
    ]
    for line in lines:
        console.print(Text(visible(line)))
    style = "green" if verdict.valid else "bold red"
    console.print(Text.assemble("  signature: ", (visible(verdict.status), style)))
    return 0 if verdict.valid else 1


def card_command(args: argparse.Namespace) -> int:
    return asyncio.run(_card(args))


async def _peers(args: argparse.Namespace) -> int:
    localapi, proxy = _tailnet_access(args)
    console = Console(stderr=True)
    try:
        with console.status("asking the tailnet's agents for their cards..."):
            peers = await discover(
                localapi, KnownAgents(), scheme=args.scheme, port=args.port,
                per_peer_timeout=args.timeout, proxy=proxy,
            )  # fmt: skip
    except LocalAPIUnavailable as exc:
        print(f"tailagent: {exc}: {START_TAILSCALED}, or name its socket with "
              "--tailscale-socket (a box without tailscaled: run `tailagent serve --tsnet` "
              "first; its node answers)", file=sys.stderr)  # fmt: skip
        return 2
    finally:
        await localapi.aclose()
    if args.json:
        for peer in peers:
            print(json.dumps(peer.as_dict()))
        return 0
    table = Table("peer", "owner", "url", "agent", "skills", "delegation", "signature")
    for p in peers:
        # The agents its catalog lists to this node; the card's name where it has none.
        agents = ", ".join(p.agents) or p.name
        hands = "accepted" if p.delegation else "-"
        values = (p.peer, p.owner, p.url, agents, ", ".join(p.skills), hands)
        cells = [Text(visible(v)) for v in values]
        style = "green" if p.signature.startswith("valid") else "red"
        table.add_row(*cells, Text(visible(p.signature), style))
    Console(width=None if sys.stdout.isatty() else 240).print(table)
    if not peers:
        print("no tailagent answered on the tailnet's online peers", file=sys.stderr)
    return 0


def _tailnet_access(args: argparse.Namespace) -> tuple[LocalAPI, str | None]:
    """tailscaled, or on a box without one, the running `serve --tsnet` server's node."""
    socket = find_socket(Path(args.tailscale_socket) if args.tailscale_socket else None)
    node = node_without_tailscaled(args.state_dir, socket)
    if node is not None:
        return node.localapi(), node.proxy
    return LocalAPI.tailscaled(socket), None


def peers_command(args: argparse.Namespace) -> int:
    return asyncio.run(_peers(args))
