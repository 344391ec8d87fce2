"""Who sent a request, read once from the SDK's call context: the person the bridge
passes along.

Admission, ownership, the answer's judge, a conversation's operations, a turn, an
answer and a cancel each need the caller several ways (the Caller for its roles and
owner, the Answerer a decision is signed with, the audit log's name for it); read from
the context one at a time, the readings could drift apart or be done a dozen times per
request. The handler, where a request enters the bridge, calls `requester_of` once and
hands the value on; the executor, reached through a2a-sdk with only the context, gets
the same value back (it is kept in the context's state). It lives beside the answers
whose `Answerer` it builds, not in `tailagent.access` (which knows the Caller but must
not import the bridge's answers).
"""

from __future__ import annotations

from dataclasses import dataclass

from a2a.server.context import ServerCallContext

from tailagent.access.identity import Caller, caller_of
from tailagent.bridge.answers.records import DEFAULT_VIA, Answerer
from tailagent.store.tasks import OwnerScope, owner_scope

# The call-context state key naming the channel a request came through ("web" from
# the web page); absent means A2A.
VIA_KEY = "via"
# The call-context state key the request's Requester is kept under once read.
REQUESTER_KEY = "tailagent.requester"


@dataclass(frozen=True, slots=True)
class Requester:
    """The person one request comes from, as the bridge passes them along: the access
    layer's Caller (None when it established nobody), with what only a request to the
    bridge has (the channel, an answer's signature, the audit's name) and the owner
    scope its tasks and conversations are looked up in."""

    caller: Caller | None
    answerer: Answerer  # who a decision is signed with, from which device and channel
    audit_name: str  # the audit log's `answered_by`
    scope: OwnerScope  # whose tasks and conversations it reaches, as the store reads them

    @property
    def owner(self) -> str:
        """Whose work it is (the person its cost is counted to), and the metrics' name
        for a decider: one per caller, never per device or channel."""
        return self.caller.owner if self.caller else "unknown"

    def may(self, role: str) -> bool:
        """Whether the caller holds `role` (an admin holds every one); nobody holds none."""
        return self.caller is not None and self.caller.may(role)

    @property
    def roles(self) -> frozenset[str]:
        return self.caller.roles if self.caller else frozenset()

    @property
    def delegated_by(self) -> str:
        """The box that handed this work here for the person ("" for a direct caller)."""
        return self.caller.delegated_by if self.caller else ""

    @property
    def chain(self) -> tuple[str, ...]:
        """The actor chain it came with, verified (empty for a direct caller)."""
        return self.caller.chain if self.caller else ()


def requester_of(context: ServerCallContext | None) -> Requester:
    """The request's caller, answerer and audit name, read together the first time it is
    asked for, and the same value after."""
    kept = context.state.get(REQUESTER_KEY) if context is not None else None
    if isinstance(kept, Requester):
        return kept
    requester = _read(context)
    if context is not None:
        context.state[REQUESTER_KEY] = requester
    return requester


def _read(context: ServerCallContext | None) -> Requester:
    caller = caller_of(context)
    via = context.state.get(VIA_KEY) if context is not None else None
    via = via if isinstance(via, str) and via else DEFAULT_VIA
    scope = owner_scope(context) if context is not None else OwnerScope("")
    if caller is None:
        return Requester(None, Answerer("unknown", via=via), "unknown", scope)
    # A device is its short MagicDNS name, as people call it; for work another box
    # handed here, the person's own device, as the chain names it (not the box).
    node = caller.device if caller.delegated_by else caller.node.split(".")[0]
    answerer = Answerer(caller.who, node, via)
    device = f" on {answerer.node}" if answerer.node else ""
    channel = f" via {via}" if via != DEFAULT_VIA else ""
    # How the caller was established, then the device and the channel
    # (`user:a@b (whois …) on laptop via web`; handed here by another box,
    # `user:a@b (actor chain from devbox-1, …) via devbox-1 on laptop`).
    return Requester(caller, answerer, caller.describe() + device + channel, scope)
