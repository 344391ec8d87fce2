"""The keys other nodes sign their hops of an actor chain with: chain.KeyLookup.

A hop names its key by the JWKS URL (`jku`) of its node's card and a `kid`. The key is
trusted as the card's is (card/verify.py): on first use, for the jku's origin, pinned
in `<state_dir>/known_nodes.json`; after that a hop must be signed with the pinned key.
A new kid is a rotation (`tailagent keys rotate` keeps the old key in the JWKS for 7
days) only while the node's JWKS still lists the pinned key: the node itself vouches
for its new key, and the new one is pinned. A key that replaced the pinned one outright
is refused until the owner of this box removes the pin, as ssh does a changed host key.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from tailagent.card.verify import KnownAgents
from tailagent.delegation.chain import ChainRefused, node_name

KNOWN_NODES_FILE = "known_nodes.json"
# A JWKS holds a key or two: anything much larger is not one.
MAX_JWKS_BYTES = 64 * 1024
FETCH_TIMEOUT = httpx.Timeout(5.0)


def _origin(jku: str) -> str:
    parts = urlsplit(jku)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _same_key(a: dict[str, Any], b: dict[str, Any]) -> bool:
    members = ("kty", "crv", "x", "y")
    return all(a.get(m) == b.get(m) for m in members)


class NodeKeys:
    """chain.KeyLookup for the server: `(node, jku, kid) -> public JWK`, or ChainRefused
    saying what to do. `proxy` reaches the tailnet (tailscaled's outbound proxy, or the
    tsnet node's)."""

    def __init__(self, known: KnownAgents, proxy: str | None = None) -> None:
        self._known = known
        self._proxy = proxy or None
        # One look-up per origin at a time: two hops of one node pin once.
        self._locks: dict[str, asyncio.Lock] = {}

    @classmethod
    def of_state_dir(cls, state_dir: Path, proxy: str | None = None) -> NodeKeys:
        return cls(KnownAgents(state_dir / KNOWN_NODES_FILE), proxy)

    async def __call__(self, node: str, jku: str, kid: str) -> dict[str, Any]:
        parts = urlsplit(jku)
        if parts.scheme not in ("http", "https") or node_name(parts.hostname or "") != node_name(
            node
        ):
            raise ChainRefused(f"its key URL {jku} is not on node {node}")
        origin = _origin(jku)
        async with self._locks.setdefault(origin, asyncio.Lock()):
            return await self._key(node, jku, kid, origin)

    async def _key(self, node: str, jku: str, kid: str, origin: str) -> dict[str, Any]:
        # cryptography loads with the first chain checked, not with the server.
        from tailagent.card.keys import thumbprint

        pinned = self._known.get(origin)
        if pinned is not None and pinned["jwk"].get("kid") == kid:
            jwk: dict[str, Any] = pinned["jwk"]
            return jwk
        keys = await self._fetch(node, jku)
        found = next((k for k in keys if k.get("kid") == kid), None)
        if found is None:
            raise ChainRefused(f"bad signature (no key {kid} in {jku}, the keys of {node})")
        if thumbprint(found) != kid:
            raise ChainRefused(f"bad signature (key {kid} in {jku} is not the key its kid names)")
        if pinned is not None and not any(_same_key(pinned["jwk"], k) for k in keys):
            raise ChainRefused(
                f"bad signature (key {kid} is not the key pinned for {origin} "
                f"({pinned['jwk'].get('kid')}), and {jku} no longer lists that one: the "
                f"node's key was replaced, or this is not the node you trusted. Check with "
                f"its owner, then remove {origin} from {self._known.path} to trust it anew)"
            )
        # The JWKS lists the node's current key first: a hop signed with a retired key
        # still in its grace verifies, but the pin never moves back to it.
        if found is keys[0]:
            self._known.pin(origin, found)
        return found

    async def _fetch(self, node: str, jku: str) -> list[dict[str, Any]]:
        """The node's JWKS, bounded in time and size."""
        try:
            async with (
                httpx.AsyncClient(timeout=FETCH_TIMEOUT, proxy=self._proxy) as http,
                http.stream("GET", jku) as response,
            ):
                response.raise_for_status()
                body = b""
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_JWKS_BYTES:
                        raise ValueError(f"more than {MAX_JWKS_BYTES} bytes")
            keys = json.loads(body).get("keys")
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            raise ChainRefused(
                f"cannot fetch the keys of {node} from {jku} ({exc or type(exc).__name__}): "
                "is its tailagent running and reachable from this box?"
            ) from None
        if not isinstance(keys, list):
            raise ChainRefused(f"cannot read the keys of {node} from {jku}: no key list")
        return [k for k in keys if isinstance(k, dict)]
