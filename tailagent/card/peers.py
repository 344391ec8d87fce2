"""Every tailagent on the tailnet: ask tailscaled for the online peers, fetch each
one's card at the standard path, and check its signature. A peer that runs no
tailagent is simply not in the answer."""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from tailagent.access.localapi import LocalAPI
from tailagent.card.verify import KnownAgents, fetch_card, verify_card


@dataclass(frozen=True)
class Peer:
    peer: str
    owner: str
    url: str
    name: str
    skills: list[str]
    signature: str

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
            try:
                card = await fetch_card(url, http)
            except (httpx.HTTPError, ValueError):
                return None  # no tailagent there
            verdict = await verify_card(card, url, http, known.get(url))
            skills = [s.get("name", "") for s in card.get("skills") or []]
            return Peer(host, owner, url, str(card.get("name", "")), skills, verdict.status)

    async with httpx.AsyncClient(timeout=per_peer_timeout, proxy=proxy) as http:
        results = await asyncio.gather(*(probe(http, *c) for c in candidates))
    return sorted((p for p in results if p is not None), key=lambda p: p.peer)
