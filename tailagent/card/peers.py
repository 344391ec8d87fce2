"""Every tailagent on the tailnet: ask tailscaled for the online peers, read each
one's AI Catalog (what it lists to this node: its agents, and whether this node may
hand it work), then its card at the standard path, and check the card's signature. A
peer that runs no tailagent is simply not in the answer; one without a catalog (an
older tailagent) lists no agents."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from tailagent.card.catalog import A2A_CARD_TYPE, CATALOG_PATH, EXTENSION
from tailagent.card.verify import KnownAgents, Verdict, fetch_card, verify_card
from tailagent.tailnet.localapi import LocalAPI

# A catalog lists an agent or a few: one much larger is not read.
MAX_CATALOG_BYTES = 256 * 1024


@dataclass(frozen=True)
class Peer:
    peer: str
    owner: str
    url: str
    name: str
    skills: list[str]
    signature: str
    # What the peer's AI Catalog lists to this node: its agents' names, and whether
    # this node may hand it work (delegation.allowed_nodes there).
    agents: list[str] = field(default_factory=list)
    delegation: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _candidates(
    status: dict[str, Any], scheme: str, port: int | None
) -> list[tuple[str, str, str]]:
    users = status.get("User") or {}
    found = []
    for peer in (status.get("Peer") or {}).values():
        if not peer.get("Online"):
            continue
        host = str(peer.get("DNSName") or "").rstrip(".")
        if not host:
            continue
        tags = peer.get("Tags") or []
        login = (users.get(str(peer.get("UserID"))) or {}).get("LoginName", "")
        owner = ",".join(tags) if tags else login
        default = {"http": 80, "https": 443}[scheme]
        authority = f"{host}:{port}" if port and port != default else host
        found.append((host, owner, f"{scheme}://{authority}"))
    return found


async def checked_card(
    card: dict[str, Any], url: str, http: httpx.AsyncClient, known: KnownAgents
) -> Verdict:
    """The card at `url` checked against its pin in `known`, as that store of pins
    would have it (following a rotation, pinning on first use: see KnownAgents)."""
    pinned = known.get(url)
    verdict = await verify_card(card, url, http, pinned, known.follows_rotation)
    if verdict.valid and pinned is None and verdict.jwk and known.pins_first_use:
        known.pin(url, verdict.jwk)
    return verdict


def _accepts(entry: dict[str, Any]) -> bool:
    extensions = entry.get("extensions")
    ours = extensions.get(EXTENSION) if isinstance(extensions, dict) else None
    return isinstance(ours, dict) and ours.get("acceptsDelegation") is True


async def read_catalog(url: str, http: httpx.AsyncClient) -> tuple[list[str], bool]:
    """The A2A agents a peer's catalog lists to this node, and whether any accepts its
    delegation; none for a peer without a catalog or with one that is not one."""
    try:
        response = await http.get(url.rstrip("/") + CATALOG_PATH)
        response.raise_for_status()
        if len(response.content) > MAX_CATALOG_BYTES:
            return [], False
        entries = response.json().get("entries")
    except (httpx.HTTPError, ValueError, AttributeError):
        return [], False
    if not isinstance(entries, list):
        return [], False
    agents = [e for e in entries if isinstance(e, dict) and e.get("type") == A2A_CARD_TYPE]
    names = [str(e.get("displayName") or e.get("identifier") or "") for e in agents]
    delegation = any(_accepts(e) for e in agents)
    return names, delegation


async def discover(
    localapi: LocalAPI,
    known: KnownAgents,
    *,
    scheme: str = "https",
    port: int | None = None,
    concurrency: int = 16,
    per_peer_timeout: float = 3.0,
    proxy: str | None = None,
) -> list[Peer]:
    candidates = _candidates(await localapi.status(), scheme, port)
    limit = asyncio.Semaphore(concurrency)

    async def probe(http: httpx.AsyncClient, host: str, owner: str, url: str) -> Peer | None:
        async with limit:
            agents, delegation = await read_catalog(url, http)
            try:
                card = await fetch_card(url, http)
            except (httpx.HTTPError, ValueError):
                return None  # no tailagent there
            verdict = await checked_card(card, url, http, known)
            skills = [s.get("name", "") for s in card.get("skills") or []]
            name = str(card.get("name", ""))
            return Peer(host, owner, url, name, skills, verdict.status, agents, delegation)

    async with httpx.AsyncClient(timeout=per_peer_timeout, proxy=proxy) as http:
        results = await asyncio.gather(*(probe(http, *c) for c in candidates))
    return sorted((p for p in results if p is not None), key=lambda p: p.peer)
