"""Who sent a request, read once from the SDK's call context.

A turn, an answer and a cancel each need the caller several ways (the Caller for its
roles and owner, the Answerer a decision is signed with, the audit log's name for it);
read from the context one at a time, the readings could drift apart or be done a dozen
times per request. `requester_of` reads them together, once, into one value the turn
carries. It lives in the bridge, not in `tailagent.access` (which knows the Caller but
must not import the bridge's answers).
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


def requester_of(context: ServerCallContext | None) -> Requester:
    """The request's caller, answerer and audit name, read together."""
    caller = caller_of(context)
    via = context.state.get(VIA_KEY) if context is not None else None
    via = via if isinstance(via, str) and via else DEFAULT_VIA
    if caller is None:
        return Requester(None, Answerer("unknown", via=via), "unknown")
    # A device is its short MagicDNS name, as people call it.
    answerer = Answerer(caller.who, caller.node.split(".")[0], via)
    device = f" on {answerer.node}" if answerer.node else ""
    channel = f" via {via}" if via != DEFAULT_VIA else ""
    # How the caller was established, then the device and the channel
    # (`user:a@b (whois …) on laptop via web`).
    return Requester(caller, answerer, caller.describe() + device + channel)
