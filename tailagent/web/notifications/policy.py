"""Who a Web Push subscription's person is now: the access policy asked again before
each message, as the desk's access layer would for a request from their device.

A subscription outlives the grant that let its person in (a grant removed, a login
taken off `access.allowed_logins`, a token revoked), so before a prompt's command, its
first line and an Allow token go to a device, whois is asked about the device's
tailnet address kept with the subscription, and the policy decides with that answer.
tailscaled unreachable, or no peer at that address now: not told this time. The
policy refusing them, or the address now someone else's: not let in, and the
subscription is dropped. A subscription made on this box (a sign-in, a token) has no
device to ask about: its token, or `access.local_without_token`, decides.
"""

from __future__ import annotations

from tailagent.access.policy import Policy, Refusal, Seen
from tailagent.access.resolve import Resolver
from tailagent.access.tokens import TokenStore
from tailagent.tailnet.localapi import LocalAPIUnavailable
from tailagent.webpush.standing import Standing
from tailagent.webpush.subscriptions import Subscription

TAILNET_KINDS = ("user:", "tags:")  # Caller.owner of a tailnet person or tagged node


class PolicyNow:
    def __init__(self, policy: Policy, resolver: Resolver, tokens: TokenStore) -> None:
        self._policy = policy  # the access guard's own: same settings, same node owner
        self._resolver = resolver
        self._tokens = tokens

    async def __call__(self, subscription: Subscription) -> Standing:
        owner = subscription.owner
        token = None
        if owner.startswith(TAILNET_KINDS):
            try:
                seen = await self._tailnet(subscription.address)
            except LocalAPIUnavailable:
                return Standing()
            if seen is None:
                return Standing()
        else:
            seen = Seen(None, "a push subscription made on this box")
            kind, _, name = owner.partition(":")
            if kind == "token":
                token = next((t for t in self._tokens.list() if t.name == name), None)
                if token is None:
                    return Standing(let_in=False, why=f"the token {name!r} was revoked")
        decided = self._policy.decide(seen, token)
        if isinstance(decided, Refusal):
            # 403: known and not let in. Otherwise (access.require_token wants the token
            # a request would carry): not told, and kept.
            return Standing(let_in=decided.status != 403, why=decided.reason)
        if decided.owner != owner:
            return Standing(let_in=False, why=f"{subscription.address} is {decided.owner} now")
        return Standing(decided.roles)

    async def _tailnet(self, address: str) -> Seen | None:
        """What whois says of the device now; None when no peer holds its address."""
        me = await self._resolver.current_self()
        if me.dns_name is None:  # tailscaled has not described this node yet
            raise LocalAPIUnavailable("this node's owner is not known yet")
        self._policy.owner_login = me.owner_login  # as the guard sets it for a request
        peer = await self._resolver.localapi.whois(address) if address else None
        return None if peer is None else Seen(peer, "whois of a subscribed device")
