"""The keys other nodes sign their hops of an actor chain with: chain.KeyLookup.

A hop's key is trusted only from the node that signed it, and only from its tailagent:
the key set that tailagent's card declares, fetched from that card's own URL, which is
the node's tailnet name on the port this box reaches tailagents at (`delegation.scheme`
and `delegation.port`, as `tailagent peers` and handing work out use). A hop whose key
URL (`jku`) is anything else, another port, path or scheme of the same node, is refused
and never fetched: any process or user on a node can serve a key set on a port of its
own, and before issue 55 such a key was pinned beside the real one and signed for anyone.

The key is pinned per node name in `<state_dir>/known_nodes.json`, with the card URL it
came from; a node pinned for another card URL is refused (a second origin for one node).
A new kid is a rotation (`tailagent keys rotate` keeps the old key in the JWKS for 7
days) only while the node's own key set still lists the pinned key: the node itself
vouches for its new key, and the new one is pinned. A key that replaced the pinned one
outright is refused until the owner of this box removes the pin, as ssh does a changed
host key.

Before issue 55 the file pinned per ORIGIN (`"http://devbox-1.tail.test:8932": {"jwk",
"trusted"}`): whatever key set a hop's `jku` named on a port of the node, no card read.
Such a pin is dropped when the server starts (`drop_old_pins`, one log line saying how
many and which), none converted. An origin's pin other than the card URL's may be a
forger's port pinned before the fix; and even the pin under the card URL's own origin
proves nothing: it was fetched from whatever path a hop named on that origin (another
backend `tailscale serve` maps there, say), under the delegation.port of its day, and
never checked against the card. What would prove it is reading the node's card now,
which is exactly what re-pinning does: the node's next hop pins its key from its card,
as on first meeting.
"""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from tailagent.card.publish import JWKS_PATH
from tailagent.card.verify import CARD_PATH, KnownAgents, verify_card
from tailagent.delegation.chain import ChainRefused, node_name
from tailagent.statedir.files import write_private

KNOWN_NODES_FILE = "known_nodes.json"
# A JWKS holds a key or two, a card a few skills: anything much larger is neither.
MAX_JWKS_BYTES = 64 * 1024
MAX_CARD_BYTES = 256 * 1024
FETCH_TIMEOUT = httpx.Timeout(5.0)
_DEFAULT_PORTS = {"http": 80, "https": 443}
log = logging.getLogger(__name__)


def _same_url(a: str, b: str) -> bool:
    """Scheme, host, port and path exactly (host as node names compare); no user,
    query or fragment on either."""
    x, y = urlsplit(a), urlsplit(b)
    if any(p.username or p.password or p.query or p.fragment for p in (x, y)):
        return False
    try:
        ports = [p.port or _DEFAULT_PORTS.get(p.scheme.lower()) for p in (x, y)]
    except ValueError:  # a port that is not one
        return False
    return (
        x.scheme.lower() == y.scheme.lower()
        and node_name(x.hostname or "") == node_name(y.hostname or "")
        and ports[0] == ports[1]
        and x.path.rstrip("/") == y.path.rstrip("/")
    )


def _same_key(a: dict[str, Any], b: dict[str, Any]) -> bool:
    members = ("kty", "crv", "x", "y")
    return all(a.get(m) == b.get(m) for m in members)


class KnownNodes:
    """node name -> the key pinned for it and the card URL it came from, on disk."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, Any]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def _write(self, data: dict[str, Any]) -> None:
        write_private(self.path, json.dumps(data, indent=2, sort_keys=True) + "\n")

    def get(self, node: str) -> dict[str, Any] | None:
        """The node's pin (a node name never has the `://` of an old origin pin)."""
        entry: dict[str, Any] | None = self._read().get(node)
        return entry

    def pin(self, node: str, card: str, jwk: dict[str, Any]) -> None:
        data = self._read()
        trusted = datetime.now(UTC).isoformat()
        data[node] = {"jwk": jwk, "card": card, "trusted": trusted}
        self._write(data)

    def drop_old_pins(self) -> int:
        """Removes the pins of the format before issue 55, keyed by origin, and says so
        in one line (see the module's docstring for why none is kept); how many. A file
        that cannot be read is left as it is, for the chain checks to say so."""
        try:
            data = self._read()
        except (OSError, ValueError):
            return 0
        old = sorted(name for name in data if "://" in name)
        if old:
            self._write({n: e for n, e in data.items() if n not in old})
            log.warning(
                "%s: dropped %d node key pin(s) of the format before issue 55, per origin "
                "(%s): each node's key is pinned again from its card, at its tailagent's "
                "own URL, the next time it hands work here",
                self.path, len(old), ", ".join(old),
            )  # fmt: skip
        return len(old)


class CardPins(KnownAgents):
    """The pins as a peer's card is checked against them when this box hands work out
    (card/peers.py reads `get(card URL)`): the key pinned for the card URL's node, when
    it was pinned from that very card URL; a rotation is followed as the node's key set
    vouches for it (card/verify.py); a node met first this way is pinned from its card,
    as its first hop would have pinned it. So a node's key is one key both ways: the key
    its hops here are checked with is the key its card must be signed with."""

    follows_rotation = True  # as the node's hops are followed (NodeKeys)
    pins_first_use = True  # the first card read from the node's own URL, as a first hop

    def __init__(self, known: KnownNodes) -> None:
        super().__init__(known.path)
        self._nodes = known

    def get(self, url: str) -> dict[str, Any] | None:
        pinned = self._nodes.get(node_name(urlsplit(url).hostname or ""))
        if pinned is None or not _same_url(str(pinned.get("card")), url):
            return None
        return {"jwk": pinned["jwk"]}

    def pin(self, url: str, jwk: dict[str, Any]) -> None:
        self._nodes.pin(node_name(urlsplit(url).hostname or ""), url.rstrip("/"), jwk)


class NodeKeys:
    """chain.KeyLookup for the server: `(node, jku, kid) -> public JWK`, or ChainRefused
    saying what to do. `proxy` reaches the tailnet (tailscaled's outbound proxy, or the
    tsnet node's); `scheme` and `port` are where a node's tailagent is (its card's URL)."""

    def __init__(
        self, known: KnownNodes, *, scheme: str = "https", port: int = 443, proxy: str = ""
    ) -> None:
        self._known = known
        self._scheme = scheme
        self._port = port
        self._proxy = proxy or None
        # One look-up per node at a time: two hops of one node pin once.
        self._locks: dict[str, asyncio.Lock] = {}

    @classmethod
    def of_state_dir(
        cls, state_dir: Path, *, scheme: str = "https", port: int = 443, proxy: str = ""
    ) -> NodeKeys:
        """The server's: its pins in the state dir, old-format ones dropped first."""
        known = KnownNodes(state_dir / KNOWN_NODES_FILE)
        known.drop_old_pins()
        return cls(known, scheme=scheme, port=port, proxy=proxy)

    def card_url(self, node: str) -> str:
        """Where the node's tailagent is: its tailnet name on the tailagent port."""
        default = _DEFAULT_PORTS.get(self._scheme)
        authority = node if self._port == default else f"{node}:{self._port}"
        return f"{self._scheme}://{authority}"

    async def __call__(self, node: str, jku: str, kid: str) -> dict[str, Any]:
        node = node_name(node)
        card = self.card_url(node)
        if not _same_url(jku, card + JWKS_PATH):
            raise ChainRefused(
                f"bad signature (its key URL {jku} is not the key set of {node}'s tailagent, "
                f"{card}{JWKS_PATH}, as its card at {card} declares: a key set served by "
                f"another process, another port or another user on {node} signs for no one)"
            )
        async with self._locks.setdefault(node, asyncio.Lock()):
            return await self._key(node, card, kid)

    async def _key(self, node: str, card: str, kid: str) -> dict[str, Any]:
        # cryptography loads with the first chain checked, not with the server.
        from tailagent.card.keys import thumbprint

        pinned = self._known.get(node)
        if pinned is not None and not _same_url(str(pinned.get("card")), card):
            raise ChainRefused(
                f"bad signature ({node} is pinned for its tailagent at {pinned.get('card')}, "
                f"not {card}: one node has one tailagent's key. Check with its owner, then "
                f"remove {node} from {self._known.path} to trust it anew)"
            )
        if pinned is not None and pinned["jwk"].get("kid") == kid:
            jwk: dict[str, Any] = pinned["jwk"]
            return jwk
        keys = await self._card_keys(node, card)
        found = next((k for k in keys if k.get("kid") == kid), None)
        jku = card + JWKS_PATH
        if found is None:
            raise ChainRefused(f"bad signature (no key {kid} in {jku}, the keys of {node})")
        if thumbprint(found) != kid:
            raise ChainRefused(f"bad signature (key {kid} in {jku} is not the key its kid names)")
        if pinned is not None and not any(_same_key(pinned["jwk"], k) for k in keys):
            raise ChainRefused(
                f"bad signature (key {kid} is not the key pinned for {node} "
                f"({pinned['jwk'].get('kid')}), and {jku} no longer lists that one: the "
                f"node's key was replaced, or this is not the node you trusted. Check with "
                f"its owner, then remove {node} from {self._known.path} to trust it anew)"
            )
        # The JWKS lists the node's current key first: a hop signed with a retired key
        # still in its grace verifies, but the pin never moves back to it.
        if found is keys[0]:
            self._known.pin(node, card, found)
        return found

    async def _card_keys(self, node: str, card: str) -> list[dict[str, Any]]:
        """The key set the node's card declares: the card read from its own URL, which
        it must name as its own, signed with a key of the set at `card`/JWKS_PATH."""
        jku = card + JWKS_PATH
        async with httpx.AsyncClient(timeout=FETCH_TIMEOUT, proxy=self._proxy) as http:
            card_json = await _get_json(http, node, card + CARD_PATH, MAX_CARD_BYTES)
            declared = [i.get("url") for i in card_json.get("supportedInterfaces") or []]
            if not declared or not all(_same_url(str(url), card) for url in declared):
                raise ChainRefused(
                    f"the card at {card} declares {declared}, not {card}: it is not the "
                    f"tailagent of {node} (fix its --public-url, or this box's delegation.port)"
                )
            keys = (await _get_json(http, node, jku, MAX_JWKS_BYTES)).get("keys")
            if not isinstance(keys, list) or not keys:
                raise ChainRefused(f"cannot read the keys of {node} from {jku}: no key list")
            keys = [k for k in keys if isinstance(k, dict)]
            # The card must be signed with a key of this set: the set is the card's.
            from jwt.exceptions import PyJWTError

            for key in keys:
                try:
                    if (await verify_card(card_json, card, http, {"jwk": key})).pinned:
                        return keys
                except PyJWTError:  # a key that is not one signs nothing
                    continue
        raise ChainRefused(
            f"the card at {card} is not signed with a key of {jku}: it is not the "
            f"tailagent of {node}"
        )


async def _get_json(http: httpx.AsyncClient, node: str, url: str, limit: int) -> dict[str, Any]:
    """One JSON object from `url`, bounded in time and size."""
    try:
        async with http.stream("GET", url, headers={"A2A-Version": "1.0"}) as response:
            response.raise_for_status()
            body = b""
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > limit:
                    raise ValueError(f"more than {limit} bytes")
        found = json.loads(body)
    except (httpx.HTTPError, ValueError) as exc:
        raise ChainRefused(
            f"cannot fetch {url} ({exc or type(exc).__name__}): is the tailagent of {node} "
            "running and reachable from this box?"
        ) from None
    if not isinstance(found, dict):
        raise ChainRefused(f"cannot read {url}: not a JSON object")
    return found
