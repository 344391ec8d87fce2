"""The desk's Web Push, put together once per server: what `server.py` wires to the
task store's saves and `web/push_routes.py` serves to the page."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tailagent.webpush.actions import ActionTokens
from tailagent.webpush.alerts import Alerts
from tailagent.webpush.keys import load_vapid, public_key
from tailagent.webpush.sender import PushSender
from tailagent.webpush.services import PushServices
from tailagent.webpush.subscriptions import Subscriptions


@dataclass(frozen=True)
class WebPush:
    box: str  # this box, as its people name it
    public_key: str  # the VAPID key browsers subscribe with
    subscriptions: Subscriptions
    tokens: ActionTokens
    sender: PushSender
    alerts: Alerts

    @classmethod
    def open(
        cls,
        state_dir: Path,
        secret: bytes,
        *,
        services: tuple[str, ...],
        ttl: int,
        contact: str,
        box: str,
        agent: str,
    ) -> WebPush:
        key = load_vapid(state_dir)
        subscriptions = Subscriptions(state_dir, PushServices(services))
        tokens = ActionTokens(secret)
        sender = PushSender(key, subscriptions, contact, ttl)
        alerts = Alerts(subscriptions, sender, tokens, box=box, agent=agent)
        return cls(box, public_key(key), subscriptions, tokens, sender, alerts)

    async def aclose(self) -> None:
        await self.sender.aclose()
