"""Work another tailagent hands here for a person: the caller an actor chain makes.

Whois names only the box that calls; the person it works for rides in the request's
`A2A-Actor-Chain` header, a hop signed by each node it passed. Taken on the box's word
alone, any box allowed to hand work here could claim to be anyone; judged as the box,
the work would run as nobody's. So a chain is taken only from a node
`delegation.allowed_nodes` names, only once its checker (delegation/chain.py, handed
in by the server: the access layer checks no signature itself) has verified it, and
then the request is the person's, with the roles this box would give them directly
and `delegation.roles` both allow.

The header is judged from the head alone, before the body is read; a message's own
`metadata.actorChain`, when it carries one, must then be the header's chain.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from tailagent.access.bodies import BodyRefused
from tailagent.access.identity import Caller
from tailagent.access.policy import Policy, Refusal, Seen

CHAIN_HEADER = b"a2a-actor-chain"
CHAIN_KEY = "actorChain"


class ChainNotAccepted(Exception):
    """The checker's refusal of a chain; str() is the one line saying which check failed."""


class VerifiedChain(Protocol):
    """What a verified chain says (delegation/chain.py's `Verified`)."""

    @property
    def person(self) -> str: ...  # whose work it is: the first hop's person

    @property
    def device(self) -> str: ...  # their device as the first box's whois named it

    @property
    def acting(self) -> str: ...  # who acts now: the last hop's person (an answerer)

    @property
    def tokens(self) -> tuple[str, ...]: ...


# (the header's value, the calling node as whois names it, this node's MagicDNS name)
# -> the verified chain; raises ChainNotAccepted.
ChainChecker = Callable[[str, str, str], Awaitable[VerifiedChain]]


async def delegated_caller(
    policy: Policy, checker: ChainChecker | None, seen: Seen, header: str, this_node: str
) -> Caller | Refusal:
    """The person a chain names, as this box's caller; or why it is refused (403)."""
    peer = seen.peer
    if peer is None:
        return Refusal(
            403, f"an actor chain is taken only from a tailnet node ({seen.established_by})"
        )
    short = peer.node.name.split(".")[0]
    if not policy.may_delegate(peer):
        return Refusal(
            403, f"node {short} may not hand work here: add it to delegation.allowed_nodes"
        )
    if checker is None or not this_node:
        return Refusal(403, "actor chain refused: this server cannot check chains now")
    try:
        verified = await checker(header, peer.node.name, this_node)
    except ChainNotAccepted as exc:
        return Refusal(403, f"actor chain refused: {exc}")
    return policy.delegated(
        peer,
        person=verified.person,
        acting=verified.acting,
        device=verified.device,
        chain=tuple(verified.tokens),
        established_by=(
            f"carried by {short}, {seen.established_by}"
            if policy.is_sibling(peer) and len(verified.tokens) == 1
            else f"actor chain from {short}, {seen.established_by}"
        ),
    )


def message_chain_refused(body: bytes, chain: Sequence[str]) -> BodyRefused | None:
    """Refuses a message whose `metadata.actorChain` is there but is not the chain its
    request's header carried (which is the one verified): a body must not name one
    person while the head was checked for another."""
    try:
        request = json.loads(body) if body else {}
    except (ValueError, RecursionError):
        return None  # not JSON: a2a-sdk refuses it, and no metadata names anyone
    params = request.get("params") if isinstance(request, dict) else None
    message = (
        params if isinstance(params, dict) else request if isinstance(request, dict) else {}
    ).get("message")
    metadata = message.get("metadata") if isinstance(message, dict) else None
    if not isinstance(metadata, dict) or CHAIN_KEY not in metadata:
        return None
    if metadata[CHAIN_KEY] == list(chain):
        return None
    return BodyRefused(403, "ACTOR_CHAIN", "the message's actorChain is not the request's")
