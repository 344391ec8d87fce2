"""Who a browser on this box is, when it has no tailnet identity: a signed-in session.

A browser on the tailnet needs nothing here: whois names it, as it names an A2A
caller. A browser on the box itself reaches the loopback listener with no identity
at all, and cannot send the local token. So `tailagent web` (run by the owner, who
can read the local token) asks the server for a sign-in link: good once, for a few
minutes. Opening it sets a session cookie that the access layer honours on the
page's routes only (`DESK_PREFIX`), never on the A2A routes, so a page or a program
that somehow holds the cookie cannot drive the agent over A2A with it.

The cookie is signed with a key of the state dir (0600), not stored: sessions
survive a restart, and rotating the local token (`tailagent token revoke local`)
ends every one of them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from pathlib import Path
from typing import Any

from tailagent.access.identity import Caller
from tailagent.access.tokens import LOCAL_TOKEN_NAME, TokenInfo, TokenStore
from tailagent.files import write_private

DESK_PREFIX = "/desk"
COOKIE_NAME = "tailagent_desk"
SECRET_FILE = "desk-secret"
TICKET_SECONDS = 300
SESSION_SECONDS = 12 * 3600
SIGNED_IN = "signed in on this box (tailagent web)"


def is_desk_path(path: str) -> bool:
    return path == DESK_PREFIX or path.startswith(DESK_PREFIX + "/")


def opens_root(scope: dict[str, Any]) -> bool:
    """A browser opening `/`, where the JSON-RPC route answers only POST: the desk's."""
    if scope["path"] != "/" or scope["method"] not in ("GET", "HEAD"):
        return False
    accept = next((v for k, v in scope.get("headers", ()) if k.lower() == b"accept"), b"")
    return b"text/html" in accept


def is_page_request(scope: dict[str, Any]) -> bool:
    """A request for the approval desk, which the page's rules govern."""
    return is_desk_path(scope["path"]) or opens_root(scope)


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


class BrowserSessions:
    """Sign-in tickets (one use, in memory) and the session cookies they become."""

    def __init__(self, secret: bytes, tokens: TokenStore) -> None:
        self._secret = secret
        self._tokens = tokens
        self._tickets: dict[str, float] = {}  # sha256(ticket) -> expiry (monotonic)

    def _local(self) -> TokenInfo | None:
        """The local token: a session is only as good as the token it stands for."""
        return next((t for t in self._tokens.list() if t.name == LOCAL_TOKEN_NAME), None)

    def _sign(self, payload: bytes) -> str:
        return _b64(hmac.new(self._secret, b"session:" + payload, hashlib.sha256).digest())

    def new_ticket(self) -> str:
        now = time.monotonic()
        self._tickets = {k: v for k, v in self._tickets.items() if v > now}
        ticket = secrets.token_urlsafe(24)
        self._tickets[hashlib.sha256(ticket.encode()).hexdigest()] = now + TICKET_SECONDS
        return ticket

    def redeem(self, ticket: str) -> str | None:
        """The session cookie's value for a valid ticket, which is then spent."""
        expiry = self._tickets.pop(hashlib.sha256(ticket.encode()).hexdigest(), None)
        local = self._local()
        if expiry is None or expiry < time.monotonic() or local is None:
            return None
        claims = {"exp": int(time.time()) + SESSION_SECONDS, "tok": local.created}
        payload = json.dumps(claims).encode()
        return f"{_b64(payload)}.{self._sign(payload)}"

    def caller(self, cookie_header: str) -> Caller | None:
        """The signed-in owner a request's cookie names, if it is valid now."""
        value = _cookie(cookie_header, COOKIE_NAME)
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
        local = self._local()
        if local is None or claims.get("tok") != local.created:
            return None
        return Caller(
            kind="token",
            login=LOCAL_TOKEN_NAME,
            roles=frozenset(local.roles),
            established_by=SIGNED_IN,
        )


def session_cookie(value: str, *, secure: bool) -> str:
    """The Set-Cookie value: HttpOnly, SameSite=Strict, on the page's routes only."""
    flags = f"Path={DESK_PREFIX}; Max-Age={SESSION_SECONDS}; HttpOnly; SameSite=Strict"
    return f"{COOKIE_NAME}={value}; {flags}{'; Secure' if secure else ''}"


def _cookie(header: str, name: str) -> str | None:
    for pair in header.split(";"):
        key, _, value = pair.strip().partition("=")
        if key == name:
            return value
    return None
