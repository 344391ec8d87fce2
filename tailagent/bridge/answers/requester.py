"""Who sent a request, read once from the SDK's call context.

A turn, an answer and a cancel each need the caller several ways (the Caller for its
roles and owner, the Answerer a decision is signed with, the audit log's name for it);
read from the context one at a time, the readings could drift apart or be done a dozen
times per request. `requester_of` reads them together, once, into one value the turn
carries. It lives beside the answers whose `Answerer` it builds, not in
`tailagent.access` (which knows the Caller but must not import the bridge's answers).
"""

from __future__ import annotations

from dataclasses import dataclass

from a2a.server.context import ServerCallContext

from tailagent.access.identity import Caller, caller_of
from tailagent.bridge.answers.records import DEFAULT_VIA, Answerer

# The call-context state key naming the channel a request came through ("web" from
# the web page); absent means A2A.
VIA_KEY = "via"


@dataclass(frozen=True, slots=True)
class Requester:
    """The caller of one request: None when the access layer established nobody."""

    caller: Caller | None
    answerer: Answerer  # who a decision is signed with, from which device and channel
    audit_name: str  # the audit log's `answered_by`

    @property
    def owner(self) -> str:
        """Whose work it is (the person its cost is counted to), and the metrics' name
        for a decider: one per caller, never per device or channel."""
        return self.caller.owner if self.caller else "unknown"

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
    """The request's caller, answerer and audit name, read together."""
    caller = caller_of(context)
    via = context.state.get(VIA_KEY) if context is not None else None
    via = via if isinstance(via, str) and via else DEFAULT_VIA
    if caller is None:
        return Requester(None, Answerer("unknown", via=via), "unknown")
    # A device is its short MagicDNS name, as people call it; for work another box
    # handed here, the person's own device, as the chain names it (not the box).
    node = caller.device if caller.delegated_by else caller.node.split(".")[0]
    answerer = Answerer(caller.who, node, via)
    device = f" on {answerer.node}" if answerer.node else ""
    channel = f" via {via}" if via != DEFAULT_VIA else ""
    # How the caller was established, then the device and the channel
    # (`user:a@b (whois …) on laptop via web`; handed here by another box,
    # `user:a@b (actor chain from devbox-1, …) via devbox-1 on laptop`).
    return Requester(caller, answerer, caller.describe() + device + channel)
