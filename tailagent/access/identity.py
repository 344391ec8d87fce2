"""The Caller: who sent a request, as the access layer established it.

A Caller owns the tasks it creates; a2a-sdk's stores scope every read by the
owner name given here, so one caller never sees another's tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from a2a.server.context import ServerCallContext

CallerKind = Literal["user", "tagged", "token", "local"]
SCOPE_KEY = "tailagent.caller"
# Who asks for the AI Catalog: the guard names the viewer there but never refuses, so
# this is never the caller a route may act for (card/catalog.py).
VIEWER_KEY = "tailagent.viewer"
# A JSON-RPC request's body as the guard parsed it: what the SDK's parse drops (a
# SubscribeToTask's metadata) is read from it.
RPC_KEY = "tailagent.rpc"
ALL_ROLES = frozenset({"caller", "approver", "admin"})


@dataclass(frozen=True, slots=True)
class Caller:
    """A person (or tagged node, token, local process) as the access layer established
    them: what the guard, the policy, the card and the desk know of who calls.

    The bridge carries it inside its Requester (bridge/answers/requester.py), which adds
    what only a request to the bridge has: the channel it came by and the name an
    answer is signed with. It stays its own type because access, below the bridge,
    must know nothing of either.
    """

    kind: CallerKind
    login: str
    roles: frozenset[str] = frozenset()
    display_name: str = ""
    node: str = ""
    tags: tuple[str, ...] = ()
    established_by: str = ""
    # The device's tailnet address, as whois named it ("" off the tailnet): what the
    # policy is asked about again when no request is there (a notification's person).
    address: str = ""
    # Came through an actor chain (another tailagent handing work here for a person):
    # the calling node's short name, the verified tokens (which a box that is itself a
    # middle hop extends), and the person's device as the first box's whois named it
    # (`node` is then the box that called, not where the person sits).
    delegated_by: str = ""
    chain: tuple[str, ...] = ()
    device: str = ""
    # Carried here by a sibling box (cluster/carry.py) for work that runs here: that
    # box's short name. The person is as if they called directly (`node` is their
    # device), and the request is never carried on.
    carried_by: str = ""

    @property
    def owner(self) -> str:
        """The stable name tasks are stored under."""
        if self.kind == "tagged":
            return "tags:" + ",".join(sorted(self.tags))
        return f"{self.kind}:{self.login}"

    @property
    def who(self) -> str:
        """The name a decision is signed with: a login, a tagged node's tags, or
        `token:<name>` (a token's name alone could pass for a login)."""
        if self.kind == "tagged":
            return ",".join(sorted(self.tags))
        return f"token:{self.login}" if self.kind == "token" else self.login

    def may(self, role: str) -> bool:
        return role in self.roles or "admin" in self.roles

    @property
    def sees_every_task(self) -> bool:
        """Whether the owner scope of this caller's requests is everyone's tasks and
        conversations (an admin's, whose box it is) rather than their own: the store
        keeps rows for a scope, and roles are decided here."""
        return self.may("admin")

    def describe(self) -> str:
        """The access line's and the audit's name: `user:a@b (whois …)`, and for work
        handed here by another box, ` via devbox-1` after it."""
        named = f"{self.owner} ({self.established_by})" if self.established_by else self.owner
        return f"{named} via {self.delegated_by}" if self.delegated_by else named


def caller_of(context: ServerCallContext | None) -> Caller | None:
    if context is None:
        return None
    caller = context.state.get("caller")
    return caller if isinstance(caller, Caller) else None
