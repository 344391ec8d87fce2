"""What the access policy says of a subscription's person at the moment of sending.

A subscription outlives the grant that let its person in. Were whom a prompt reaches
decided by the roles someone had when they subscribed, a person whose grant was
removed would still get the next command, the task's first line and an Allow token
on their phone. So the policy is asked again before each message
(web/notifications/policy.py does, as the desk's access layer would for a request from
that device); Web Push knows only its answer, never how it was reached.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tailagent.webpush.subscriptions import Subscription


@dataclass(frozen=True, slots=True)
class Standing:
    # What the person may do now; empty: not told this time (tailscaled cannot say, or
    # the device is not on the tailnet now), the subscription kept for later.
    roles: frozenset[str] = frozenset()
    # False: the policy lets them in no more; their subscription is dropped.
    let_in: bool = True
    why: str = ""  # for a subscription dropped: the policy's reason, for the log

    def may(self, role: str) -> bool:
        return role in self.roles or "admin" in self.roles


# Asks the policy about one subscription's person, now.
Judge = Callable[[Subscription], Awaitable[Standing]]


async def nobody_yet(_subscription: Subscription) -> Standing:
    """The judge until the app hands over the policy: nobody is told (fail closed)."""
    return Standing()
