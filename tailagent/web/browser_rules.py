"""The browser's rules, on the desk's own mount: which requests are the page's, and
what a page request meets before the desk's app, apart from the API's rules
(access/api_rules.py), as Tailscale's safeweb keeps its browser mux apart.

A page request (a desk path, or a browser opening `/`) meets, in order: the unix user
of its connection learned (`LocalUser`, what a sign-in is bound to); the access guard,
as every route does, with one more way in, a sign-in on this box (`SignedInHere`,
sessions.py); a change refused unless it comes from the page's own origin
(`SameOrigin`: DESIGN.md's rule 3 for the page's routes, where the API refuses every
browser origin); the body's limits and the streams a caller holds, as on the API. The
form token (forms.py) and the CSP (desk_app.py) are the desk app's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import urlsplit

from tailagent.access.asgi import ASGI, headers_of, layered
from tailagent.access.bodies import BodyLimit, BodyLimits
from tailagent.access.guard import BEARER_KEY, AccessGuard
from tailagent.access.identity import SCOPE_KEY, Caller
from tailagent.access.policy import Refusal
from tailagent.access.refusals import refuse
from tailagent.access.resolve import Resolver
from tailagent.access.streams import StreamCaps, StreamCounts
from tailagent.web.sessions import DESK_PREFIX, UID_KEY, BrowserSessions, local_uid

DEFAULT_PORTS = {"http": 80, "https": 443}


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


class LocalUser:
    """Puts in the scope (sessions.py's UID_KEY) the unix user whose process opened the
    connection; None for what tailscale serve forwards (its socket is tailscaled's, its
    browser elsewhere), or where the kernel cannot say."""

    def __init__(self, app: ASGI, *, resolver: Resolver) -> None:
        self._app = app
        self._resolver = resolver

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            forwarded = b"x-forwarded-for" in headers_of(scope)
            scope[UID_KEY] = None if forwarded else await self._resolver.local_owner(scope)
        await self._app(scope, receive, send)


@dataclass(frozen=True)
class SignedInHere:
    """The access guard's other way in on the desk's routes only: the sign-in cookie of
    a browser on this box, honoured on connections of the user who signed in."""

    sessions: BrowserSessions

    def __call__(
        self, scope: dict[str, Any], headers: dict[bytes, str], refusal: Refusal
    ) -> Caller | Refusal:
        signed_in = self.sessions.caller(headers.get(b"cookie", ""), local_uid(scope))
        if signed_in is not None:
            return signed_in
        return Refusal(
            401,
            f"{refusal.reason}. In a browser on this box, sign in with the link that "
            "`tailagent web` prints",
        )


def _origin(scheme: str, netloc: str) -> str | None:
    """`scheme://host:port` with the port always written, so two ways of writing one
    origin compare equal; None for what is not an http(s) origin."""
    try:
        parts = urlsplit(f"{scheme}://{netloc}")
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:
        return None
    if port is None or not parts.hostname or scheme not in DEFAULT_PORTS:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{scheme}://{host.lower()}:{port}"


class SameOrigin:
    """Refuses a change to the page (any method but GET and HEAD) from a caller let in
    unless it comes from the page's own origin, scheme, host and port alike: to a
    browser every port of a host is one site."""

    def __init__(self, app: ASGI, *, advertised_url: str) -> None:
        self._app = app
        # A page opened at the advertised URL is this server's whatever Host reaches the
        # listener: the embedded node's TLS leaves no X-Forwarded-Proto to say https.
        parts = urlsplit(advertised_url)
        self._advertised_origin = _origin(parts.scheme, parts.netloc)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and isinstance(scope.get(SCOPE_KEY), Caller):
            token_verified = scope.get(BEARER_KEY) is True
            cross = self._cross_site(scope["method"], headers_of(scope), token_verified)
            if cross is not None:
                message = f"{cross} may not change anything here"
                await refuse(scope, receive, send, 403, "ORIGIN", 0, message)
                return
        await self._app(scope, receive, send)

    def _page_origins(self, headers: dict[bytes, str]) -> set[str]:
        """This server's origins for a page request: the one its browser addressed (the
        Host already names this server; tailscale serve's X-Forwarded-Host and -Proto
        say what the browser used, and no page can make a browser send those), and
        the advertised one."""
        scheme = headers.get(b"x-forwarded-proto", "http").strip().lower()
        netloc = headers.get(b"x-forwarded-host") or headers.get(b"host", "")
        found = (_origin(scheme, netloc.strip()), self._advertised_origin)
        return {origin for origin in found if origin is not None}

    def _cross_site(
        self, method: str, headers: dict[bytes, str], token_verified: bool
    ) -> str | None:
        """Why a change must be refused as coming from another site, if it must."""
        if method in ("GET", "HEAD"):
            return None
        fetch_site = headers.get(b"sec-fetch-site")
        if fetch_site is not None:
            return None if fetch_site == "same-origin" else f"a {fetch_site} request"
        origin = headers.get(b"origin")
        if origin is None:
            # Browsers send Origin on every POST; a program sends a valid token instead.
            return None if token_verified else "a request with no Origin"
        parts = urlsplit(origin)
        if _origin(parts.scheme, parts.netloc) in self._page_origins(headers):
            return None
        return f"a request from {origin}"


@dataclass(frozen=True)
class BrowserRules:
    """What the desk's mount puts in front of the desk: `guard` is the access guard's
    maker with the server's policy, resolver and tokens (the same as the API's)."""

    guard: partial[AccessGuard]
    resolver: Resolver
    sessions: BrowserSessions
    advertised_url: str
    limits: BodyLimits
    streams: StreamCounts

    def around(self, desk: ASGI) -> ASGI:
        """`desk` behind the browser's rules, in the order a page request meets them."""
        return layered(
            desk,
            partial(LocalUser, resolver=self.resolver),
            partial(self.guard, signed_in=SignedInHere(self.sessions)),
            partial(SameOrigin, advertised_url=self.advertised_url),
            partial(BodyLimit, limits=self.limits),
            partial(StreamCaps, counts=self.streams),
        )
