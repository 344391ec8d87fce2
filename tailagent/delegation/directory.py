"""The tailagents on the tailnet this node may hand work to, and finding one by name.

What `tailagent peers` shows (card/peers.py discover: each online peer's AI Catalog and
its card), kept to the peers whose card verifies: a peer whose signature does not check
is not one an agent may hand a person's work to. Asked of the tailnet at most every
TTL seconds: an agent lists peers, then delegates to one, within a turn.
"""

from __future__ import annotations

import asyncio
import time

from tailagent.agents.events import DelegationFailed
from tailagent.card.peers import Peer, discover
from tailagent.card.verify import KnownAgents
from tailagent.tailnet.localapi import LocalAPI, LocalAPIUnavailable

TTL = 30.0


def _names(peer: Peer) -> set[str]:
    """What a person or an agent may call a peer: its short host name, its MagicDNS
    name, or its URL."""
    full = peer.peer.rstrip(".").lower()
    return {full, full.split(".")[0], peer.url.rstrip("/").lower()}


class PeerDirectory:
    def __init__(
        self,
        localapi: LocalAPI,
        known: KnownAgents,
        scheme: str = "https",
        port: int | None = None,
        proxy: str | None = None,
    ) -> None:
        self._localapi = localapi
        self._known = known
        self._scheme = scheme
        self._port = port
        self._proxy = proxy or None
        self._found: list[Peer] = []
        self._at = -TTL
        self._asking = asyncio.Lock()

    async def peers(self, *, fresh: bool = False) -> list[Peer]:
        """The online peers whose card verifies, at most TTL seconds old (`fresh`: ask
        the tailnet now)."""
        async with self._asking:
            if fresh or time.monotonic() - self._at >= TTL:
                try:
                    found = await discover(
                        self._localapi, self._known, scheme=self._scheme,
                        port=self._port, proxy=self._proxy,
                    )  # fmt: skip
                except LocalAPIUnavailable as exc:
                    raise DelegationFailed(f"cannot list the tailnet's peers: {exc}") from None
                self._found = [p for p in found if p.signature.startswith("valid")]
                self._at = time.monotonic()
            return list(self._found)

    async def find(self, name: str) -> Peer:
        """The peer `name` names (short host name, MagicDNS name or URL); a peer that
        came online since the last listing is looked for once more before refusing."""
        wanted = name.strip().rstrip("./").lower()
        for fresh in (False, True):
            for peer in await self.peers(fresh=fresh):
                if wanted in _names(peer):
                    return peer
        there = ", ".join(sorted({p.peer.split(".")[0] for p in self._found}))
        listed = f"the peers there are: {there}" if there else "no tailagent answered there"
        raise DelegationFailed(
            f"no tailagent {name!r} on the tailnet whose card verifies; {listed}"
        )
