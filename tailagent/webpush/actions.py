"""The tokens behind a notification's Allow and Deny: one use, one person, one request.

A notification's buttons answer without the page, so the answer cannot carry a form
token of a page. The push carries this token instead, and the service worker posts it
back. It is an HMAC over the person, the task and the request, so a token read off
one phone is worthless for any other person, task or prompt; it is good once, and for
a day at most. A spent token is kept in the store until it expires (a set in memory
would forget it at a restart, and the token would be good again). The answer it brings
still goes through the access layer, which must name that very person, and through
the handler, which refuses an answer to a prompt that no longer waits.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Protocol

TOKEN_SECONDS = 24 * 3600


class ActionRefused(ValueError):
    """A notification's answer the server will not act on; str() is what is shown."""


@dataclass(frozen=True, slots=True)
class Bound:
    """What a token answers: a person's answer to one request of one task."""

    owner: str
    task_id: str
    request_id: str


class SpentAnswers(Protocol):
    """Where spent tokens are kept (store/spent_tokens.py: the store)."""

    async def spend(self, nonce: str, expires: int) -> bool:
        """True on a nonce's first use; False for one spent before (kept until it expires)."""
        ...


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class ActionTokens:
    def __init__(self, secret: bytes) -> None:
        self._key = hmac.new(secret, b"webpush-action", hashlib.sha256).digest()
        self._spent: SpentAnswers | None = None

    def keep_spent_in(self, spent: SpentAnswers) -> None:
        """The store the app hands over; until then no answer is taken."""
        self._spent = spent

    def _mac(self, payload: bytes) -> str:
        return _b64(hmac.new(self._key, payload, hashlib.sha256).digest())

    def issue(self, bound: Bound) -> str:
        claims = {
            "o": bound.owner,
            "t": bound.task_id,
            "r": bound.request_id,
            "e": int(time.time()) + TOKEN_SECONDS,
            "n": secrets.token_urlsafe(12),
        }
        payload = json.dumps(claims, separators=(",", ":")).encode()
        return f"{_b64(payload)}.{self._mac(payload)}"

    async def redeem(self, token: str, owner: str) -> Bound:
        """What `token` answers, spent now; ActionRefused unless it is `owner`'s, unspent
        and unexpired. A token shown by another person is refused and left unspent."""
        encoded, _, mac = token.partition(".")
        try:
            payload = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
        except (binascii.Error, ValueError):
            raise ActionRefused("this notification's answer is not one this server made") from None
        if not hmac.compare_digest(mac, self._mac(payload)):
            raise ActionRefused("this notification's answer is not one this server made")
        claims = json.loads(payload)
        if claims["e"] < time.time():
            raise ActionRefused("this notification is over a day old: answer on the task's page")
        if claims["o"] != owner:
            raise ActionRefused("this notification was sent to another person")
        if self._spent is None:
            raise ActionRefused("this server is still starting: answer on the task's page")
        if not await self._spent.spend(str(claims["n"]), int(claims["e"])):
            raise ActionRefused("this notification's answer was already used")
        return Bound(claims["o"], claims["t"], claims["r"])
