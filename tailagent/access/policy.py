"""The access policy: from what tailscaled (or a token) says, to a Caller with roles,
or a refusal that tells the caller what would let them in.

Roles: `caller` sends work and sees its own tasks; `approver` may also answer
permission prompts; `admin` may do anything, on any task. With no configuration,
only the login that owns this node gets in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tailagent.access.identity import ALL_ROLES, Caller
from tailagent.access.localapi import WhoIs
from tailagent.access.tokens import TokenInfo
from tailagent.config import AccessSettings


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int  # 401: no usable identity; 403: known, not allowed; 503: cannot tell
    reason: str

    @property
    def error(self) -> str:
        return {401: "unauthorized", 403: "forbidden"}.get(self.status, "identity unavailable")


@dataclass(frozen=True, slots=True)
class Seen:
    """What the network established about a request, before the policy decides."""

    peer: WhoIs | None
    established_by: str  # kept with the caller: in every access line and audit row
    advice: str = ""  # for a refusal only: what would let a tailnet caller in


def grant_roles(capabilities: dict[str, list[Any]], capability: str | None) -> set[str]:
    """Roles that tailnet grants give, e.g. `{"role": "approver"}` or `{"roles": [...]}`."""
    roles: set[str] = set()
    for value in capabilities.get(capability or "", []) if capability else []:
        if not isinstance(value, dict):
            continue
        named = value.get("roles", [])
        if isinstance(value.get("role"), str):
            named = [*named, value["role"]] if isinstance(named, list) else [value["role"]]
        roles.update(r for r in named if isinstance(r, str) and r in ALL_ROLES)
    return roles


class Policy:
    def __init__(self, settings: AccessSettings) -> None:
        self.settings = settings
        self.owner_login: str | None = None  # learned from tailscaled's status

    def _peer_roles(self, peer: WhoIs) -> set[str]:
        s = self.settings
        roles = grant_roles(peer.capabilities, s.capability)
        if peer.tagged:
            if set(peer.node.tags) & set(s.allowed_tags):
                roles.update(s.tag_roles)
        elif self.owner_login and peer.user.login == self.owner_login:
            roles.update(ALL_ROLES)
        elif peer.user.login in s.allowed_logins:
            roles.update(s.login_roles)
        return roles

    def _not_allowed(self, peer: WhoIs) -> Refusal:
        grant = f", or grant it {self.settings.capability!r}" if self.settings.capability else ""
        if peer.tagged:
            tags = ", ".join(peer.node.tags)
            return Refusal(
                403,
                f"node {peer.node.name} ({tags}): add one of its tags to "
                f"access.allowed_tags{grant}",
            )
        owner = f" (only {self.owner_login}, the owner of this node, by default)"
        return Refusal(
            403,
            f"login {peer.user.login} is not in access.allowed_logins"
            f"{grant}{owner if self.owner_login else ''}",
        )

    def decide(self, seen: Seen, token: TokenInfo | None) -> Caller | Refusal:
        peer = seen.peer
        if peer is not None:
            roles = self._peer_roles(peer)
            if roles and self.settings.require_token:
                if token is None:
                    return Refusal(
                        401,
                        "this server requires a bearer token on top of the "
                        "tailnet identity (access.require_token)",
                    )
                roles &= ALL_ROLES if "admin" in token.roles else set(token.roles)
            if roles:
                return Caller(
                    kind="tagged" if peer.tagged else "user",
                    login="" if peer.tagged else peer.user.login,
                    roles=frozenset(roles),
                    display_name=peer.user.display_name if not peer.tagged else "",
                    node=peer.node.name,
                    tags=peer.node.tags,
                    established_by=seen.established_by,
                    address=peer.node.addresses[0].split("/")[0] if peer.node.addresses else "",
                )
            if token is None:
                return self._not_allowed(peer)
        if token is not None:
            return Caller(
                kind="token",
                login=token.name,
                roles=frozenset(token.roles),
                established_by=f"bearer token, {seen.established_by}",
            )
        if self.settings.local_without_token:
            return Caller(
                kind="local",
                login="local",
                roles=frozenset({"caller", "approver"}),
                established_by=f"{seen.established_by}; access.local_without_token",
            )
        return Refusal(
            401,
            f"no tailnet identity ({seen.established_by}{seen.advice}): local callers need a "
            "bearer token; `tailagent call` on this box uses the local token "
            "by itself, others use `tailagent token add`",
        )
