"""Who a browser on this box is, when it has no tailnet identity: a signed-in session.

A browser on the tailnet needs nothing here: whois names it, as it names an A2A
caller. A browser on the box itself reaches the loopback listener with no identity
at all, and cannot send the local token. So `tailagent web` (run by the owner, who
can read the local token) asks the server for a sign-in link: good once, for a few
minutes. Opening it sets a session cookie that the desk's own mount honours
(web/browser_rules.py), on the page's routes only (`DESK_PREFIX`), never on the A2A
routes, so a page or a program that somehow holds the cookie cannot drive the agent
over A2A with it.

The cookie is signed with a key of the state dir (0600), not stored: sessions
survive a restart, and rotating the local token (`tailagent token revoke local`)
ends every one of them.

A cookie is scoped by host, never by port: every listener on 127.0.0.1, another
user's or another tailagent's, is sent it, and `SameSite=Strict` counts them all as
one site. So neither the link nor the cookie is a credential by itself: the link
counts only for the unix user whose `tailagent web` asked for it, and the cookie
only on connections of the user who opened the link, as the kernel names the owner
of each loopback connection (access/peercred.py). Where it cannot say, nothing
counts. Each server's cookie has a name of its own, so two on one box keep theirs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tailagent.access.identity import Caller
from tailagent.access.policy import Refusal
from tailagent.access.tokens import LOCAL_TOKEN_NAME, TokenInfo, TokenStore
from tailagent.statedir.files import write_private

log = logging.getLogger(__name__)

DESK_PREFIX = "/desk"
COOKIE_PREFIX = "tailagent_desk_"
UID_KEY = "tailagent.uid"  # the scope key: the unix user owning a local connection
SECRET_FILE = "desk-secret"
TICKET_SECONDS = 300
SESSION_SECONDS = 12 * 3600
SIGNED_IN = "signed in on this box (tailagent web)"


def local_uid(scope: Mapping[str, Any]) -> int | None:
    """The unix user of a page request's connection, as the desk's mount learned it
    from the kernel (None: not a connection of a process on this box, or not known)."""
    uid = scope.get(UID_KEY)
    return uid if isinstance(uid, int) else None


def load_secret(state_dir: Path) -> bytes:
    """The state dir's key for cookies and form tokens, made on first use."""
    path = state_dir / SECRET_FILE
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        secret = secrets.token_bytes(32)
        write_private(path, secret.hex() + "\n")
        return secret


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SignInRefused(Exception):
    """A sign-in link that signs nobody in; str() is what the person reads."""


class BrowserSessions:
    """Sign-in tickets (one use, in memory) and the session cookies they become."""

    def __init__(self, secret: bytes, tokens: TokenStore) -> None:
        self._secret = secret
        self._tokens = tokens
        self._tickets: dict[str, tuple[float, int]] = {}  # sha256(ticket) -> (expiry, uid)
        # Stable for the state dir, and saying nothing of the key it is made from.
        tag = hmac.new(secret, b"cookie-name", hashlib.sha256).hexdigest()[:12]
        self.cookie_name = COOKIE_PREFIX + tag

    def _local(self) -> TokenInfo | None:
        """The local token: a session is only as good as the token it stands for."""
        return next((t for t in self._tokens.list() if t.name == LOCAL_TOKEN_NAME), None)

    def _sign(self, payload: bytes) -> str:
        return _b64(hmac.new(self._secret, b"session:" + payload, hashlib.sha256).digest())

    def new_ticket(self, uid: int) -> str:
        """A one-use ticket for the unix user `uid`, who asked for it."""
        now = time.monotonic()
        self._tickets = {k: v for k, v in self._tickets.items() if v[0] > now}
        ticket = secrets.token_urlsafe(24)
        self._tickets[_digest(ticket)] = (now + TICKET_SECONDS, uid)
        return ticket

    def redeem(self, ticket: str, uid: int | None) -> str:
        """The session cookie's value for a valid ticket opened by its own user, which
        then spends it. Another user's attempt is refused and leaves it unspent: the
        link stays its maker's. Raises SignInRefused."""
        key = _digest(ticket)
        expiry, owner = self._tickets.get(key, (0.0, None))
        local = self._local()
        if expiry < time.monotonic() or local is None:
            raise SignInRefused(
                "This sign-in link was used already or is too old (links last 5 minutes and "
                "work once). Run `tailagent web` on this box for a new one."
            )
        if uid != owner:
            log.warning(
                "refused a desk sign-in link made for uid %s, opened by %s",
                owner, _whose(uid),
            )  # fmt: skip
            raise SignInRefused(
                f"This sign-in link was made for another user of this box (uid {owner}), and "
                f"{_this_browser(uid)}. Run `tailagent web` as the user whose browser this is."
            )
        del self._tickets[key]
        claims = {"exp": int(time.time()) + SESSION_SECONDS, "tok": local.created, "uid": uid}
        payload = json.dumps(claims).encode()
        return f"{_b64(payload)}.{self._sign(payload)}"

    def caller(self, cookie_header: str, uid: int | None) -> Caller | Refusal | None:
        """The signed-in owner a request's cookie names, if it is valid now and comes
        from its user; a refusal if it comes from another; None with no valid cookie."""
        claims = self._claims(_cookie(cookie_header, self.cookie_name))
        local = self._local()
        if claims is None or local is None or claims.get("tok") != local.created:
            return None
        if uid is None or claims.get("uid") != uid:
            log.warning(
                "refused a desk sign-in of uid %s, presented by %s",
                claims.get("uid"), _whose(uid),
            )  # fmt: skip
            return Refusal(
                403,
                f"this desk sign-in belongs to another user of this box (uid "
                f"{claims.get('uid')}), and {_this_browser(uid)}: sign in with `tailagent "
                "web`, run as the user whose browser this is",
            )
        return Caller(
            kind="token",
            login=LOCAL_TOKEN_NAME,
            roles=frozenset(local.roles),
            established_by=SIGNED_IN,
        )

    def _claims(self, value: str | None) -> dict[str, Any] | None:
        """A cookie's claims, if it is this server's own and not expired."""
        if not value or "." not in value:
            return None
        encoded, _, signature = value.partition(".")
        try:
            payload = _unb64(encoded)
            claims = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            return None
        if not hmac.compare_digest(signature, self._sign(payload)):
            return None
        if not isinstance(claims, dict) or int(claims.get("exp", 0)) < time.time():
            return None
        return claims

    def set_cookie(self, value: str, *, secure: bool) -> str:
        """The Set-Cookie value: HttpOnly, SameSite=Strict, on the page's routes only."""
        flags = f"Path={DESK_PREFIX}; Max-Age={SESSION_SECONDS}; HttpOnly; SameSite=Strict"
        return f"{self.cookie_name}={value}; {flags}{'; Secure' if secure else ''}"


def _digest(ticket: str) -> str:
    return hashlib.sha256(ticket.encode()).hexdigest()


def _whose(uid: int | None) -> str:
    return f"uid {uid}" if uid is not None else "a connection whose owner the kernel did not name"


def _this_browser(uid: int | None) -> str:
    if uid is None:
        return "the server cannot tell which user this connection is (the kernel did not say)"
    return f"this connection is uid {uid}'s"


def _cookie(header: str, name: str) -> str | None:
    for pair in header.split(";"):
        key, _, value = pair.strip().partition("=")
        if key == name:
            return value
    return None
