"""A stand-in for a browser's push service, on loopback: what Google's, Mozilla's or
Apple's would do with the desk's Web Push, checked as strictly.

It hands out subscriptions as `PushManager.subscribe` would (an endpoint here, and the
browser's keys, whose private half only this stand-in holds), then for each message
POSTed to an endpoint: checks the RFC 8292 VAPID header (an ES256 JWT for this origin,
signed by the key in `k=`, unexpired, with a contact), the RFC 8030 headers (TTL,
Urgency), and decrypts the RFC 8291 `aes128gcm` body with the subscription's keys.
A subscription can be made to answer 410 (the browser dropped it) or 503 a few times.
The benchmark uses it too (bench/bench_web.py).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import http_ece
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class Received:
    subscription: str
    message: dict[str, Any]
    headers: dict[str, str]
    vapid_key: str  # the sender's public key, from the Authorization header
    at: float = field(default_factory=time.monotonic)


@dataclass
class Browser:
    """One subscription: the endpoint and the keys a browser would hold."""

    id: str
    endpoint: str
    private_key: ec.EllipticCurvePrivateKey
    auth: bytes

    def to_json(self) -> dict[str, Any]:
        """What `PushSubscription.toJSON()` gives a page."""
        point = self.private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return {"endpoint": self.endpoint, "expirationTime": None,
                "keys": {"p256dh": b64(point), "auth": b64(self.auth)}}  # fmt: skip


class VapidRefused(Exception):
    pass


def check_vapid(authorization: str, audience: str) -> str:
    """The sender's public key, once its VAPID JWT is checked; VapidRefused otherwise."""
    scheme, _, rest = authorization.partition(" ")
    if scheme.lower() != "vapid":
        raise VapidRefused(f"not a vapid Authorization: {authorization[:40]!r}")
    params = dict(item.strip().split("=", 1) for item in rest.split(","))
    token, key = params.get("t", ""), params.get("k", "")
    public = ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), unb64(key))
    head, claims, signature = token.split(".")
    if json.loads(unb64(head)) != {"typ": "JWT", "alg": "ES256"}:
        raise VapidRefused(f"the JWT's header is {unb64(head)!r}")
    raw = unb64(signature)
    der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
    try:
        public.verify(der, f"{head}.{claims}".encode(), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise VapidRefused("the JWT's signature does not verify with k") from None
    said = json.loads(unb64(claims))
    if said.get("aud") != audience:
        raise VapidRefused(f"the JWT is for {said.get('aud')!r}, not {audience!r}")
    if not time.time() < said.get("exp", 0) <= time.time() + 24 * 3600:
        raise VapidRefused("the JWT is expired, or good for over 24 hours")
    if not str(said.get("sub", "")).startswith(("mailto:", "https://")):
        raise VapidRefused("the JWT has no contact (sub)")
    return key


class PushService:
    def __init__(self) -> None:
        self.browsers: dict[str, Browser] = {}
        self.received: list[Received] = []
        self.refused: list[str] = []  # why each refused POST was refused
        self.gone: set[str] = set()  # subscriptions that answer 410
        self.busy: dict[str, int] = {}  # subscription -> 503s still to answer
        self.changed = threading.Condition()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                service.take(self)

            def log_message(self, *_: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # the sender opens up to 16 connections at once
            daemon_threads = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def subscribe(self) -> Browser:
        made = Browser(
            secrets.token_hex(8), "", ec.generate_private_key(ec.SECP256R1()), os.urandom(16)
        )
        made.endpoint = f"{self.origin}/push/{made.id}"
        self.browsers[made.id] = made
        return made

    def take(self, request: BaseHTTPRequestHandler) -> None:
        subscription = request.path.rsplit("/", 1)[-1]
        body = request.rfile.read(int(request.headers.get("Content-Length", "0")))
        status = self._judge(subscription, request, body)
        request.send_response(status)
        request.send_header("Content-Length", "0")
        request.end_headers()

    def _judge(self, subscription: str, request: BaseHTTPRequestHandler, body: bytes) -> int:
        browser = self.browsers.get(subscription)
        if browser is None or subscription in self.gone:
            return 410
        if self.busy.get(subscription, 0) > 0:
            self.busy[subscription] -= 1
            return 503
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            key = check_vapid(headers.get("authorization", ""), self.origin)
            if headers.get("content-encoding") != "aes128gcm":
                raise VapidRefused(f"Content-Encoding {headers.get('content-encoding')!r}")
            if not headers.get("ttl", "").isdigit():
                raise VapidRefused("no TTL")
            plain = http_ece.decrypt(
                body, private_key=browser.private_key, auth_secret=browser.auth,
                version="aes128gcm",
            )  # fmt: skip
        except Exception as exc:  # every way a real push service would refuse it
            with self.changed:
                self.refused.append(f"{type(exc).__name__}: {exc}")
                self.changed.notify_all()
            return 400
        with self.changed:
            self.received.append(Received(subscription, json.loads(plain), headers, key))
            self.changed.notify_all()
        return 201

    def wait_for(self, count: int, seconds: float = 10.0) -> list[Received]:
        """The first `count` messages received, once they are here."""
        with self.changed:
            self.changed.wait_for(lambda: len(self.received) >= count or self.refused, seconds)
        assert not self.refused, f"the push service refused: {self.refused}"
        assert len(self.received) >= count, f"{len(self.received)} of {count} pushes arrived"
        return self.received[:count]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
