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
from tailagent.access.tokens import TokenInfo
from tailagent.config import AccessSettings, DelegationSettings
from tailagent.tailnet.localapi import WhoIs


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


def _names(peer: WhoIs) -> set[str]:
    """What a node is known by in a list of nodes: its MagicDNS name, short name, tags."""
    name = peer.node.name.lower().removesuffix(".")
    return {name, name.split(".")[0], *(tag.lower() for tag in peer.node.tags)}


def grants_delegation(capabilities: dict[str, list[Any]], capability: str | None) -> bool:
    """A tailnet grant that lets a node hand work here: `{"delegate": true}`."""
    values = capabilities.get(capability, []) if capability else []
    return any(isinstance(value, dict) and value.get("delegate") is True for value in values)


class Policy:
    def __init__(
        self, settings: AccessSettings, delegation: DelegationSettings | None = None
    ) -> None:
        self.settings = settings
        self.delegation = delegation or DelegationSettings()
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

    def may_delegate(self, peer: WhoIs) -> bool:
        """Whether a node may hand work here for a person: one of its tags or its name
        (short or MagicDNS) in delegation.allowed_nodes, or a grant saying so; a
        sibling may too."""
        return (
            bool(_names(peer) & set(self.delegation.allowed_nodes))
            or grants_delegation(peer.capabilities, self.settings.capability)
            or self.is_sibling(peer)
        )

    def is_sibling(self, peer: WhoIs) -> bool:
        """Whether the node is another box of this one's team (delegation.siblings): it
        carries a person's request for work that runs here (cluster/carry.py), so the
        person gets here what they would get calling this box directly."""
        return bool(_names(peer) & set(self.delegation.siblings))

    def login_roles(self, login: str) -> set[str]:
        """The roles a login gets here as itself, from this box's own settings (the
        owner, access.allowed_logins): no grant, which names a device, not a person."""
        if self.owner_login and login == self.owner_login:
            return set(ALL_ROLES)
        return set(self.settings.login_roles) if login in self.settings.allowed_logins else set()

    def delegated(
        self,
        peer: WhoIs,
        *,
        person: str,
        acting: str,
        device: str,
        chain: tuple[str, ...],
        established_by: str,
    ) -> Caller | Refusal:
        """The person a verified actor chain names, as a caller here: with the roles this
        box gives them directly and delegation.roles both allow (a sibling's carry: as
        directly, from the device they called from); refused (403) when the person (or
        who acts for them) would not be let in directly."""
        if self.settings.require_token:
            return Refusal(
                403,
                "this server requires a bearer token (access.require_token): it takes no "
                "work handed by another box",
            )
        sibling = self.is_sibling(peer) and len(chain) == 1
        cap = ALL_ROLES if sibling else set(self.delegation.roles)
        for login in dict.fromkeys((person, acting)):
            if not self.login_roles(login) & cap:
                owner = f" (only {self.owner_login} by default)" if self.owner_login else ""
                return Refusal(
                    403,
                    f"login {login} is not let in here directly: add it to "
                    f"access.allowed_logins{owner}",
                )
        if sibling:
            return Caller(
                kind="user",
                login=acting,
                roles=frozenset(self.login_roles(acting)),
                node=device,
                established_by=established_by,
                carried_by=peer.node.name.split(".")[0],
            )
        return Caller(
            kind="user",
            login=acting,
            roles=frozenset(self.login_roles(acting) & cap),
            node=peer.node.name,
            established_by=established_by,
            delegated_by=peer.node.name.split(".")[0],
            chain=chain,
            device=device,
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
