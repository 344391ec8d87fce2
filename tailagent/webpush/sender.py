"""Sends a Web Push message: encrypted for one browser (RFC 8291, `aes128gcm`), signed
with the server's VAPID key (RFC 8292), POSTed to its push service (RFC 8030).

`send` returns at once: a turn that starts waiting never waits for a push service.
Each message is its own task, a bounded number in flight; the encryption and the
signature (an ECDH and an ECDSA each) run on a worker thread, not the event loop. A
network error, 429 or 5xx is retried with backoff (Retry-After honoured, capped); 404
and 410 mean the browser dropped the subscription, which is then removed. A failing
subscription is logged once, not at every try, and again only after it recovered.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any
from urllib.parse import urlsplit

import http_ece
import httpx
from cryptography.hazmat.primitives.asymmetric import ec
from py_vapid import Vapid

from tailagent.output.metrics import WEBPUSH_SENT
from tailagent.webpush.subscriptions import Subscription, Subscriptions, unb64

log = logging.getLogger("tailagent.webpush")

# A push service takes 4,096 bytes of body: the aes128gcm header (86) and one record's
# padding delimiter and tag (17) leave this much for the message.
MAX_PAYLOAD = 4096 - 86 - 17
MAX_IN_FLIGHT = 16
ATTEMPTS = 5
FIRST_DELAY = 1.0
MAX_DELAY = 60.0
JWT_SECONDS = 12 * 3600  # RFC 8292 caps a VAPID JWT at 24 hours
RETRIED = frozenset({408, 425, 429, 500, 502, 503, 504})
GONE = frozenset({404, 410})


class PushSender:
    def __init__(
        self,
        key: Vapid,
        subscriptions: Subscriptions,
        contact: str,
        ttl: int,
        *,
        first_delay: float = FIRST_DELAY,
    ) -> None:
        self._key = key
        self._subscriptions = subscriptions
        self._contact = contact
        self._ttl = ttl
        self._first_delay = first_delay
        self._client = httpx.AsyncClient(timeout=10.0, follow_redirects=False)
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._tasks: set[asyncio.Task[None]] = set()
        self._failing: set[str] = set()  # subscriptions whose failure was logged
        self._jwts: dict[str, tuple[float, str]] = {}  # audience -> (expiry, header)

    def send(self, subscription: Subscription, message: dict[str, Any], topic: str = "") -> None:
        """Sends `message` (JSON) to one browser, in the background."""
        payload = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode()
        if len(payload) > MAX_PAYLOAD:
            raise ValueError(f"a push message is {MAX_PAYLOAD} bytes at most, not {len(payload)}")
        task = asyncio.create_task(self._deliver(subscription, payload, topic))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def settled(self) -> None:
        """Waits until every message sent so far is delivered or given up (for tests,
        benchmarks and a clean stop)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        await self._client.aclose()

    def _authorization(self, endpoint: str) -> str:
        """The VAPID header for the endpoint's push service, reused while it is fresh."""
        parts = urlsplit(endpoint)
        audience = f"{parts.scheme}://{parts.netloc}"
        now = time.time()
        cached = self._jwts.get(audience)
        if cached is not None and cached[0] - now > 3600:
            return cached[1]
        expiry = int(now) + JWT_SECONDS
        claims = {"aud": audience, "sub": self._contact, "exp": expiry}
        header = str(self._key.sign(claims)["Authorization"])
        self._jwts[audience] = (expiry, header)
        return header

    def _seal(self, subscription: Subscription, payload: bytes) -> tuple[bytes, str]:
        """The encrypted body and its Authorization header (CPU work: on a thread)."""
        body = http_ece.encrypt(
            payload,
            private_key=ec.generate_private_key(ec.SECP256R1()),
            dh=unb64(subscription.p256dh),
            auth_secret=unb64(subscription.auth),
            version="aes128gcm",
        )
        return body, self._authorization(subscription.endpoint)

    async def _deliver(self, subscription: Subscription, payload: bytes, topic: str) -> None:
        async with self._in_flight:
            body, authorization = await asyncio.to_thread(self._seal, subscription, payload)
            headers = {
                "Authorization": authorization,
                "Content-Encoding": "aes128gcm",
                "Content-Type": "application/octet-stream",
                "TTL": str(self._ttl),
                "Urgency": "high",
            }
            if topic:
                headers["Topic"] = topic
            delay = self._first_delay
            for attempt in range(1, ATTEMPTS + 1):
                problem, wait = await self._post(subscription, body, headers)
                if problem is None:
                    return
                if wait is None or attempt == ATTEMPTS:
                    self._failed(subscription, problem, final=True)
                    return
                self._failed(subscription, problem, final=False)
                WEBPUSH_SENT.labels("retried").inc()
                await asyncio.sleep(min(max(wait, delay), MAX_DELAY))
                delay *= 2

    async def _post(
        self, subscription: Subscription, body: bytes, headers: dict[str, str]
    ) -> tuple[str | None, float | None]:
        """(None, None) when delivered; else (what went wrong, how long to wait before a
        retry, or None when a retry would not help)."""
        try:
            reply = await self._client.post(subscription.endpoint, content=body, headers=headers)
        except httpx.HTTPError as exc:
            return f"{type(exc).__name__}: {exc}", 0.0
        if reply.status_code in (200, 201, 202):
            WEBPUSH_SENT.labels("sent").inc()
            if subscription.id in self._failing:
                self._failing.discard(subscription.id)
                log.info("push to %s's %s works again", subscription.owner, subscription.device)
            return None, None
        if reply.status_code in GONE:
            WEBPUSH_SENT.labels("gone").inc()
            log.info(
                "push subscription of %s on %s is gone (%d from its push service): removed",
                subscription.owner, subscription.device, reply.status_code,
            )  # fmt: skip
            await self._subscriptions.gone(subscription.id)
            return None, None
        said = f"{reply.status_code} {reply.text[:200]!r}"
        if reply.status_code in RETRIED:
            return said, _retry_after(reply)
        return said, None

    def _failed(self, subscription: Subscription, problem: str, *, final: bool) -> None:
        if final:
            WEBPUSH_SENT.labels("failed").inc()
        if subscription.id in self._failing:
            log.debug("push to %s still failing: %s", subscription.device, problem)
            return
        self._failing.add(subscription.id)
        log.warning("push to %s's %s (%s) failed: %s%s", subscription.owner, subscription.device,
                    urlsplit(subscription.endpoint).hostname, problem,
                    "" if final else "; retrying with backoff")  # fmt: skip


def _retry_after(reply: httpx.Response) -> float:
    value = reply.headers.get("Retry-After", "")
    return float(value) if value.isdigit() else 0.0
