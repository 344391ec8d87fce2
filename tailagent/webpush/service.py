"""The desk's Web Push, put together once per server: what `server.py` wires to the
task store's saves and `web/notifications/routes.py` serves to the page.

The encryption and the signatures (http-ece, py-vapid, and cryptography under them)
load only when a page asks for the server's key or a first message is sent: a server
nobody subscribed to never holds them, as it never holds the card's signing code.
"""

from __future__ import annotations

import asyncio
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tailagent.webpush.actions import ActionTokens, SpentAnswers
from tailagent.webpush.alerts import Alerts
from tailagent.webpush.push_services import PushServices
from tailagent.webpush.standing import Judge
from tailagent.webpush.subscriptions import Subscription, Subscriptions

if TYPE_CHECKING:
    from py_vapid import Vapid

    from tailagent.webpush.sender import PushSender


class WebPush:
    def __init__(
        self,
        state_dir: Path,
        secret: bytes,
        *,
        services: tuple[str, ...],
        ttl: int,
        contact: str,
        box: str,
        agent: str,
    ) -> None:
        self.box = box  # this box, as its people name it
        self.subscriptions = Subscriptions(state_dir, PushServices(services))
        self.tokens = ActionTokens(secret)
        self.alerts = Alerts(self.subscriptions, self._send, self.tokens, box=box, agent=agent)
        self._state_dir = state_dir
        self._ttl = ttl
        self._contact = contact
        self._sender: PushSender | None = None
        self._warming: asyncio.Task[None] | None = None

    def connect(self, judge: Judge, spent: SpentAnswers) -> None:
        """What Web Push needs of the rest of the server, handed over by the app once it
        has built them: the access policy asked at each sending, and the store that
        keeps spent answers. Until then nobody is told and no answer is taken."""
        self.alerts.follow(judge)
        self.tokens.keep_spent_in(spent)

    def start(self) -> None:
        """With subscriptions kept from before, loads the sender now, on a worker thread:
        otherwise the first prompt after a start would load it (~0.1 s of imports and
        the key) on the event loop, in the middle of a turn."""
        if self.subscriptions.all():
            self._warming = asyncio.create_task(asyncio.to_thread(self._load))

    def _load(self) -> None:
        import tailagent.webpush.sender  # noqa: F401 (http-ece, cryptography)

        self.public_key  # noqa: B018 (py-vapid, and the key read from the state dir)

    @cached_property
    def _vapid(self) -> Vapid:
        from tailagent.webpush.keys import load_vapid

        return load_vapid(self._state_dir)

    @cached_property
    def public_key(self) -> str:
        """The VAPID key browsers subscribe with."""
        from tailagent.webpush.keys import public_key

        return public_key(self._vapid)

    @property
    def sender(self) -> PushSender:
        if self._sender is None:
            from tailagent.webpush.sender import PushSender

            self._sender = PushSender(self._vapid, self.subscriptions, self._contact, self._ttl)
        return self._sender

    def _send(self, subscription: Subscription, message: dict[str, Any], topic: str) -> None:
        self.sender.send(subscription, message, topic)

    async def aclose(self) -> None:
        if self._warming is not None:
            await asyncio.gather(self._warming, return_exceptions=True)
        await self.alerts.aclose()
        if self._sender is not None:
            await self._sender.aclose()
