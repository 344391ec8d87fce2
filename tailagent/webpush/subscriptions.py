"""Each person's push subscriptions, kept in the state dir across restarts.

A subscription is what a browser's `PushManager.subscribe` returned: an endpoint at its
push service and the keys that encrypt for it. It belongs to the person who handed it
over (the whois identity, or the local sign-in), and to nobody else: a person lists and
removes only their own. The same endpoint handed over again (a page reloaded, another
person signed in on that browser) replaces what was kept for it, so a browser is told
once, and told as the person who subscribed it last.

No roles are kept with it: whom a prompt reaches is decided by the access policy at
the moment of sending (standing.py), from the device's tailnet address kept here.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import secrets
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tailagent.statedir.files import write_private
from tailagent.webpush.push_services import PushServices

log = logging.getLogger("tailagent.webpush")

FILE = "webpush-subscriptions.json"
MAX_PER_PERSON = 10  # a person's phones and browsers; an 11th replaces their oldest
MAX_TOTAL = 1000
MAX_ENDPOINT = 2048


class SubscriptionRefused(ValueError):
    """A subscription the server will not keep; str() is what the person reads."""


@dataclass(frozen=True, slots=True)
class Subscription:
    id: str
    owner: str  # Caller.owner: whose it is
    device: str  # where it was made, as people name it ("pixel-7", "this box")
    # The device's tailnet address, as whois named it when it subscribed ("" for a
    # browser on this box): whois is asked about it again before each message.
    address: str
    endpoint: str
    p256dh: str  # the browser's public key, base64url
    auth: str  # the browser's auth secret, base64url
    created: str

    def public(self) -> dict[str, Any]:
        """What its owner is shown (the endpoint lets a browser find its own): never
        the keys."""
        host = self.endpoint.split("/")[2] if self.endpoint.count("/") >= 2 else ""
        return {
            "id": self.id,
            "device": self.device,
            "service": host,
            "endpoint": self.endpoint,
            "created": self.created,
        }


def unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise SubscriptionRefused("the subscription's keys are not base64url") from None


def check_keys(p256dh: str, auth: str) -> None:
    """The keys as RFC 8291 needs them: a P-256 point and a 16-byte secret."""
    from cryptography.hazmat.primitives.asymmetric import ec  # only once someone subscribes

    try:
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64(p256dh))
    except ValueError:
        raise SubscriptionRefused("the subscription's p256dh is not a P-256 public key") from None
    if len(unb64(auth)) != 16:
        raise SubscriptionRefused("the subscription's auth secret is not 16 bytes")


def parse(raw: Any) -> tuple[str, str, str]:
    """(endpoint, p256dh, auth) from `PushSubscription.toJSON()`, or a refusal."""
    if not isinstance(raw, dict):
        raise SubscriptionRefused("send the subscription as PushSubscription.toJSON() gives it")
    endpoint, keys = raw.get("endpoint"), raw.get("keys")
    if not isinstance(endpoint, str) or not endpoint or len(endpoint) > MAX_ENDPOINT:
        raise SubscriptionRefused("the subscription has no endpoint (or one over 2 KiB)")
    if not isinstance(keys, dict):
        raise SubscriptionRefused("the subscription has no keys")
    p256dh, auth = keys.get("p256dh"), keys.get("auth")
    if not isinstance(p256dh, str) or not isinstance(auth, str):
        raise SubscriptionRefused("the subscription's keys need p256dh and auth")
    check_keys(p256dh, auth)
    return endpoint, p256dh, auth


class Subscriptions:
    """The book of subscriptions: in memory, written whole to the state dir on change."""

    def __init__(self, state_dir: Path, services: PushServices) -> None:
        self._path = state_dir / FILE
        self._services = services
        self._by_id: dict[str, Subscription] = {}
        self._writing = asyncio.Lock()
        self._load()

    def _load(self) -> None:
        try:
            rows = json.loads(self._path.read_text())["subscriptions"]
            for row in rows:
                found = Subscription(**row)
                self._by_id[found.id] = found
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # Kept aside, not overwritten: a person can still read what it held.
            aside = self._path.with_suffix(".unreadable")
            self._path.replace(aside)
            log.warning("push subscriptions in %s could not be read (%s): moved to %s; "
                        "people subscribe again from the desk", self._path, exc, aside)  # fmt: skip

    async def _save(self) -> None:
        async with self._writing:
            rows = [asdict(s) for s in self._by_id.values()]
            text = json.dumps({"subscriptions": rows}, indent=1)
            await asyncio.to_thread(write_private, self._path, text)

    def all(self) -> list[Subscription]:
        return list(self._by_id.values())

    def of(self, owner: str) -> list[Subscription]:
        return [s for s in self._by_id.values() if s.owner == owner]

    async def add(self, owner: str, device: str, address: str, raw: Any) -> Subscription:
        endpoint, p256dh, auth = parse(raw)
        refusal = self._services.refusal(endpoint)
        if refusal is not None:
            raise SubscriptionRefused(refusal)
        for old in [s for s in self._by_id.values() if s.endpoint == endpoint]:
            del self._by_id[old.id]
        mine = sorted(self.of(owner), key=lambda s: s.created)
        for old in mine[: max(0, len(mine) - MAX_PER_PERSON + 1)]:
            del self._by_id[old.id]
        if len(self._by_id) >= MAX_TOTAL:
            raise SubscriptionRefused(f"this server keeps {MAX_TOTAL} subscriptions at most")
        made = Subscription(
            id=secrets.token_urlsafe(9),
            owner=owner,
            device=device,
            address=address,
            endpoint=endpoint,
            p256dh=p256dh,
            auth=auth,
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        self._by_id[made.id] = made
        await self._save()
        return made

    async def remove(self, owner: str, subscription_id: str) -> bool:
        """Removes one of `owner`'s; False when they have none by that id."""
        found = self._by_id.get(subscription_id)
        if found is None or found.owner != owner:
            return False
        del self._by_id[subscription_id]
        await self._save()
        return True

    async def gone(self, subscription_id: str) -> None:
        """Nobody will read it again: its push service said it is gone (404/410), or
        the access policy lets its person in no more."""
        if self._by_id.pop(subscription_id, None) is not None:
            await self._save()
