"""The actor chain: who a delegated request is for, signed by every node it passed.

Whois on box B names only the node that calls (box A), never the person at A's desk,
and A2A carries no principal of its own. Without the chain, B could either trust A's
word for who the person is (so any allowed node could claim to be anyone) or run the
work as A's node (so B's policy, records and costs would miss the person). Each hop
here is a compact JWS signed with the node's card key, so B checks the person against
keys it pinned for the nodes themselves, and the links between hops (`prev`, `aud`)
stop entries being edited, dropped, reordered or replayed somewhere else.

The shape follows the `actorChain` of the A2A proposal a2aproject/A2A #2028: on the
wire in the `A2A-Actor-Chain` header (checked before the body is read) and, on
messages, in `Message.metadata["actorChain"]`. docs/protocol.md, "Actor chain", says
each check and why it exists; the checks below run in that order.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from tailagent.card.keys import SigningKey

# PyJWT, and cryptography under it, load with the first hop signed or read (each function
# imports them): a server nobody hands work to, or that hands none, holds neither
# (tests/test_at_rest.py).

__all__ = [
    "CHAIN_HEADER",
    "CHAIN_KEY",
    "TOKEN_TYPE",
    "ChainRefused",
    "Hop",
    "KeyLookup",
    "Nonces",
    "Verified",
    "extend",
    "hops_of",
    "parse_header",
    "sign_hop",
    "verify_chain",
]

CHAIN_KEY = "actorChain"
CHAIN_HEADER = "A2A-Actor-Chain"
TOKEN_TYPE = "tailagent-actor+jws"
ALGORITHMS = ("ES256", "EdDSA")
MAX_TOKENS = 16
MAX_HEADER_BYTES = 8 * 1024
PAYLOAD_KEYS = frozenset({"sub", "dev", "node", "aud", "task", "ctx", "iat", "nonce", "prev"})
_TOKEN = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_B64 = re.compile(r"[A-Za-z0-9_-]*")
# Which algorithm a public key is for: a header naming another one is refused, so a
# key can never be used with an algorithm it was not made for.
_KEY_ALG = {("EC", "P-256"): "ES256", ("OKP", "Ed25519"): "EdDSA"}


class ChainRefused(Exception):
    """A chain B will not act on; str() is the one line saying which check failed."""


@dataclass(frozen=True, slots=True)
class Hop:
    """One hop, as its payload says (field names spelled out; see `_payload`)."""

    person: str
    device: str
    node: str
    audience: str
    task_id: str
    context_id: str
    issued_at: int
    nonce: str
    prev: str


@dataclass(frozen=True, slots=True)
class Verified:
    """A chain every check passed: the hops, and the tokens a middle hop extends."""

    hops: tuple[Hop, ...]
    tokens: tuple[str, ...]

    @property
    def person(self) -> str:
        """Whose work it is: the first hop's person."""
        return self.hops[0].person

    @property
    def device(self) -> str:
        return self.hops[0].device

    @property
    def acting(self) -> str:
        """Who acts now: the last hop's person (who answered, on a relayed answer)."""
        return self.hops[-1].person

    @property
    def caller_node(self) -> str:
        return self.hops[-1].node

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(hop.node for hop in self.hops)


KeyLookup = Callable[[str, str, str], Awaitable[dict[str, Any]]]


def node_name(name: str) -> str:
    """Node names compare lower case, without MagicDNS's trailing dot."""
    return name.strip().rstrip(".").lower()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def link(token: str) -> str:
    """What the next hop's `prev` holds: base64url(SHA-256(token))."""
    return _b64(hashlib.sha256(token.encode("ascii")).digest())


def _payload(hop: Hop) -> dict[str, Any]:
    return {
        "sub": hop.person,
        "dev": hop.device,
        "node": hop.node,
        "aud": hop.audience,
        "task": hop.task_id,
        "ctx": hop.context_id,
        "iat": hop.issued_at,
        "nonce": hop.nonce,
        "prev": hop.prev,
    }


def sign_hop(key: SigningKey, jku: str, hop: Hop) -> str:
    """The hop as a compact JWS signed with the node's card key."""
    from jwt import api_jws

    payload = json.dumps(_payload(hop), separators=(",", ":")).encode()
    headers = {"kid": key.kid, "jku": jku, "typ": TOKEN_TYPE}
    return api_jws.encode(payload, key.key, algorithm=key.alg, headers=headers)


def extend(
    chain: Sequence[str],
    key: SigningKey,
    jku: str,
    *,
    person: str,
    device: str,
    node: str,
    audience: str,
    task_id: str,
    context_id: str,
    now: float | None = None,
) -> list[str]:
    """`chain` with this node's hop added: a fresh nonce and time, linked to the last."""
    hop = Hop(
        person=person,
        device=device,
        node=node_name(node),
        audience=node_name(audience),
        task_id=task_id,
        context_id=context_id,
        issued_at=int(time.time() if now is None else now),
        nonce=_b64(secrets.token_bytes(16)),
        prev=link(chain[-1]) if chain else "",
    )
    return [*chain, sign_hop(key, jku, hop)]


def _hop(payload: Any) -> Hop:
    """A payload as a Hop; ValueError naming what is wrong when it is not one."""
    if not isinstance(payload, dict) or set(payload) != PAYLOAD_KEYS:
        keys = sorted(payload) if isinstance(payload, dict) else type(payload).__name__
        raise ValueError(f"its payload has {keys}, not {sorted(PAYLOAD_KEYS)}")
    strings = PAYLOAD_KEYS - {"iat"}
    wrong = sorted(k for k in strings if not isinstance(payload[k], str))
    if wrong or type(payload["iat"]) is not int:
        raise ValueError(f"wrong types in its payload ({', '.join(wrong) or 'iat'})")
    if len(payload["nonce"]) != 22 or not _B64.fullmatch(payload["nonce"]):
        raise ValueError("its nonce is not 16 bytes of base64url")
    if payload["prev"] and (len(payload["prev"]) != 43 or not _B64.fullmatch(payload["prev"])):
        raise ValueError("its prev is not a SHA-256 in base64url")
    return Hop(
        person=payload["sub"],
        device=payload["dev"],
        node=node_name(payload["node"]),
        audience=node_name(payload["aud"]),
        task_id=payload["task"],
        context_id=payload["ctx"],
        issued_at=payload["iat"],
        nonce=payload["nonce"],
        prev=payload["prev"],
    )


def _read(token: str, number: int) -> tuple[dict[str, Any], Hop]:
    """The unverified header and hop of one token; ChainRefused when it is junk."""
    from jwt import api_jws
    from jwt.exceptions import PyJWTError

    try:
        parts = api_jws.decode_complete(token, options={"verify_signature": False})
        return parts["header"], _hop(json.loads(parts["payload"]))
    except (PyJWTError, ValueError) as exc:
        raise ChainRefused(f"hop {number} is not an actor chain entry: {exc}") from None


def hops_of(tokens: Sequence[str]) -> list[Hop]:
    """The hops as they say, signatures unchecked: for display, never for a decision."""
    return [_read(token, number)[1] for number, token in enumerate(tokens, 1)]


def parse_header(value: str) -> list[str]:
    """The tokens of an `A2A-Actor-Chain` header, bounded before anything is decoded."""
    size = len(value.encode())
    if size > MAX_HEADER_BYTES:
        raise ChainRefused(f"the {CHAIN_HEADER} header is {size} bytes, more than 8 KiB")
    tokens = [token.strip() for token in value.split(",")]
    if len(tokens) > MAX_TOKENS:
        raise ChainRefused(f"the {CHAIN_HEADER} header has {len(tokens)} entries, more than 16")
    for number, token in enumerate(tokens, 1):
        if not _TOKEN.fullmatch(token):
            raise ChainRefused(f"entry {number} of the {CHAIN_HEADER} header is not a JWS")
    return tokens


class Nonces(Protocol):
    """Where the nonces of last hops B accepted are kept, so a captured request cannot be
    sent again: the store (store/hop_nonces.py), so that holds across B's restarts and
    on every server sharing B's store, for twice the window (past that, the time check
    refuses the hop anyway)."""

    async def use(self, nonce: str, now: float) -> bool:
        """Records `nonce`; False when it was already used within the window. Raises
        (fail closed) rather than forget a live nonce when full."""
        ...


async def _check_signature(
    token: str, number: int, header: dict[str, Any], hop: Hop, keys: KeyLookup
) -> None:
    """Check 2: the token is what the hop's node signed with a key pinned for it."""
    where = f"hop {number} ({hop.node})"
    alg, kid, jku = header.get("alg"), header.get("kid"), header.get("jku")
    if header.get("typ") != TOKEN_TYPE:
        raise ChainRefused(f"{where}: bad signature (typ {header.get('typ')!r}, not {TOKEN_TYPE})")
    if alg not in ALGORITHMS:
        raise ChainRefused(f"{where}: bad signature (alg {alg!r}, not ES256 or EdDSA)")
    if not isinstance(kid, str) or not isinstance(jku, str):
        raise ChainRefused(f"{where}: bad signature (no kid or jku in its header)")
    parts = urlsplit(jku)
    if parts.scheme not in ("http", "https") or node_name(parts.hostname or "") != hop.node:
        raise ChainRefused(f"{where}: bad signature (its key URL {jku} is not on {hop.node})")
    try:
        jwk = await keys(hop.node, jku, kid)
    except ChainRefused as exc:
        raise ChainRefused(f"{where}: {exc}") from None
    key_alg = _KEY_ALG.get((str(jwk.get("kty")), str(jwk.get("crv"))))
    if key_alg != alg or jwk.get("alg", alg) != alg:
        raise ChainRefused(f"{where}: bad signature (alg {alg}, but key {kid} is not an {alg} key)")
    from jwt import PyJWK, api_jws
    from jwt.exceptions import PyJWTError

    try:
        api_jws.decode(token, PyJWK(jwk, algorithm=alg), algorithms=[alg])
    except PyJWTError as exc:
        raise ChainRefused(f"{where}: bad signature ({exc})") from None


def _check_links(hops: Sequence[Hop], tokens: Sequence[str], this_node: str) -> None:
    """Checks 3 and 4: each hop names the one before it and the node it calls."""
    for number, hop in enumerate(hops, 1):
        expected = link(tokens[number - 2]) if number > 1 else ""
        if hop.prev != expected:
            raise ChainRefused(f"hop {number} was edited or the chain reordered")
    for number, (hop, after) in enumerate(pairwise(hops), 1):
        if hop.audience != after.node:
            raise ChainRefused(
                f"hop {number} is addressed to {hop.audience}, but hop {number + 1} "
                f"comes from {after.node}"
            )
    if hops[-1].audience != this_node:
        raise ChainRefused(f"the chain is addressed to {hops[-1].audience}, not this node")


def _check_nodes(hops: Sequence[Hop], caller_node: str, this_node: str) -> None:
    """Checks 5 and 6: no loop, and the last hop is the node whois named."""
    seen = {this_node}
    for hop in hops:
        if hop.node in seen:
            raise ChainRefused(f"a loop: {hop.node} is in the chain twice")
        seen.add(hop.node)
    if hops[-1].node != caller_node:
        raise ChainRefused(
            f"the hop that calls is {hops[-1].node}, but the caller is {caller_node}"
        )


def _stamp(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _check_times(hops: Sequence[Hop], window: float, now: float) -> None:
    """Check 7: the last hop was signed just now; no hop claims a time to come."""
    for number, hop in enumerate(hops, 1):
        late = number == len(hops) and hop.issued_at < now - window
        if late or hop.issued_at > now + window:
            raise ChainRefused(
                f"hop {number} was signed at {_stamp(hop.issued_at)}, outside the "
                f"{window:g} s window (it is {_stamp(int(now))} here)"
            )


async def verify_chain(
    tokens: Sequence[str],
    *,
    caller_node: str,
    this_node: str,
    keys: KeyLookup,
    nonces: Nonces,
    max_depth: int = 3,
    window: float = 60,
    now: float | None = None,
) -> Verified:
    """The chain, every check passed; ChainRefused with the first check that failed.

    The nonce is recorded last, so a chain refused for another reason does not use
    up the nonce of a request that may still come honestly.
    """
    if not 1 <= len(tokens) <= max_depth:
        raise ChainRefused(
            f"the chain is {len(tokens)} hops, deeper than delegation.max_depth ({max_depth})"
            if tokens
            else "the chain is empty"
        )
    read = [_read(token, number) for number, token in enumerate(tokens, 1)]
    hops = [hop for _, hop in read]
    for number, (token, (header, hop)) in enumerate(zip(tokens, read, strict=True), 1):
        await _check_signature(token, number, header, hop, keys)
    this, caller = node_name(this_node), node_name(caller_node)
    _check_links(hops, tokens, this)
    _check_nodes(hops, caller, this)
    moment = time.time() if now is None else now
    _check_times(hops, window, moment)
    if not await nonces.use(hops[-1].nonce, moment):
        raise ChainRefused(f"hop {len(hops)}'s nonce was already used (a replay)")
    return Verified(hops=tuple(hops), tokens=tuple(tokens))
