"""The ASGI layer in front of every route: request hygiene, the caller, the policy.

It runs before any A2A code: a refused request gets its answer here, and nothing
of it reaches a handler or the agent. The card, its JWKS and the health probe
are public; everything else needs a caller the policy lets in.

The order is what keeps a stranger cheap: the headers and the connection name the
caller and the policy decides before a byte of the body is read, so a request
without credentials is answered from its head alone, however large or slow its
body; a body is then read within its limits (access/bodies.py).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from hypercorn.typing import ASGIReceiveEvent, ASGISendEvent

from tailagent.access.bodies import (
    INVALID_REQUEST,
    BodyLimits,
    BodyRefused,
    answer_unread,
    number_refused,
    read_body,
    shape_refused,
)
from tailagent.access.browser import UID_KEY, BrowserSessions, is_page_request, local_uid
from tailagent.access.delegated import (
    CHAIN_HEADER,
    ChainChecker,
    delegated_caller,
    message_chain_refused,
)
from tailagent.access.identity import RPC_KEY, SCOPE_KEY, VIEWER_KEY, Caller
from tailagent.access.localapi import LocalAPIUnavailable
from tailagent.access.logline import path_as_sent, word
from tailagent.access.policy import Policy, Refusal, Seen
from tailagent.access.refusal_page import CSP as REFUSAL_CSP
from tailagent.access.refusal_page import STYLESHEET, refusal_page
from tailagent.access.resolve import BadForwarding, Resolver, TailnetSelf
from tailagent.access.streams import StreamCounts, opens_stream
from tailagent.access.tokens import TokenInfo, TokenStore
from tailagent.output.metrics import REFUSALS, REQUESTS, route_of

log = logging.getLogger("tailagent.access")

JSON_TYPES = ("application/json", "application/a2a+json")
JSONRPC_PATH = "/"
PUBLIC_PATHS = frozenset(
    {
        "/.well-known/agent-card.json",
        "/.well-known/agent-card",
        "/.well-known/agent.json",
        "/.well-known/jwks.json",
        "/healthz",
        "/favicon.ico",  # the desk's icon, nothing else (plain_routes.py)
        "/desk/signin",  # the link's one-use ticket is the credential (access/browser.py)
        STYLESHEET,  # the desk's look, for the page that says how to sign in
    }
)
# Answered to anyone, listing what the viewer may use: the guard names the viewer there
# (VIEWER_KEY) but refuses no one (card/catalog.py).
CATALOG_PATH = "/.well-known/ai-catalog.json"
DEFAULT_PORTS = {"http": 80, "https": 443}
# A body is parsed for the log line's method and task, and to tell a stream, only up
# to this size: a large one (an attachment) would be parsed twice, here and by the SDK.
LOG_BODY_LIMIT = 64 * 1024
UNPARSED = object()  # a JSON-RPC body that is not JSON


def _replay(body: bytes, receive: Any) -> Any:
    """A receive() that yields the buffered body once, then defers to the real one."""
    sent = False

    async def replay() -> ASGIReceiveEvent:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def _headers(scope: dict[str, Any]) -> dict[bytes, str]:
    """Request headers by lower-case name; a repeated header keeps every value."""
    found: dict[bytes, str] = {}
    for key, value in scope.get("headers", ()):
        name = key.lower()
        text = value.decode("latin-1")
        found[name] = f"{found[name]}, {text}" if name in found else text
    return found


# Refusals by the access layer, in each binding's words: the JSON-RPC error code (an
# Invalid Request: no method ran) and the AIP-193 status of the HTTP+JSON binding.
ACCESS_RPC_CODE = INVALID_REQUEST
REST_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    429: "RESOURCE_EXHAUSTED",
    503: "UNAVAILABLE",
}
ERROR_WORDS = {
    400: "invalid request",
    401: "unauthorized",
    403: "forbidden",
    408: "request timeout",
    429: "too many streams",
    503: "identity unavailable",
}


def jsonrpc_error(code: int, message: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": None, "error": error}


def rest_error(status: int, reason: str, message: str) -> dict[str, Any]:
    """An AIP-193 error body, the shape the HTTP+JSON binding uses."""
    return {
        "error": {
            "code": status,
            "status": REST_STATUS.get(status, reason),
            "message": message,
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": reason,
                    "domain": "a2a-protocol.org",
                }
            ],
        }
    }


def refusal_body(status: int, reason: str, code: int, message: str, binding: str) -> Any:
    """The body of a refused request: a JSON-RPC error on the JSON-RPC route, an
    AIP-193 error on HTTP+JSON routes, else `{"error": ..., "reason": ...}`."""
    word = ERROR_WORDS.get(status, reason.lower())
    if binding == "jsonrpc":
        return jsonrpc_error(
            code or ACCESS_RPC_CODE, message, {"httpStatus": status, "error": word}
        )
    if binding == "rest":
        return rest_error(status, reason, message)
    return {"error": word, "reason": message}


async def _send(send: Any, status: int, payload: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    length = (b"content-length", str(len(payload)).encode())
    await send({"type": "http.response.start", "status": status, "headers": [length, *headers]})
    await send({"type": "http.response.body", "body": payload})


async def send_page(send: Any, status: int, title: str, message: str) -> None:
    """A refusal a person reads in a browser: the same reason, as a desk page."""
    await _send(
        send,
        status,
        refusal_page(status, title, message),
        [
            (b"content-type", b"text/html; charset=utf-8"),
            (b"content-security-policy", REFUSAL_CSP),
            (b"x-content-type-options", b"nosniff"),
        ],
    )


async def send_json(
    send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    content_type = (b"content-type", b"application/json")
    await _send(send, status, json.dumps(body).encode(), [content_type, *(headers or [])])


async def _refusal(
    send: Any, binding: str, status: int, reason: str, code: int, message: str
) -> None:
    """A refusal in the words of the binding it answers: a page for a person, else
    JSON in the binding's shape (with `WWW-Authenticate` when credentials would help)."""
    if binding == "page":
        await send_page(send, status, ERROR_WORDS.get(status, "refused"), message)
        return
    extra = [(b"www-authenticate", b"Bearer")] if status == 401 else []
    await send_json(send, status, refusal_body(status, reason, code, message, binding), extra)


def _host_name(host_header: str) -> str:
    """The host part of a Host header, lower case, without port or brackets."""
    return (urlsplit(f"//{host_header}").hostname or "").lower()


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


def _origin_of_url(url: str) -> str | None:
    parts = urlsplit(url)
    return _origin(parts.scheme, parts.netloc)


def _parsed(body: bytes) -> Any:
    """A JSON-RPC body as JSON; None when it is too large to parse here."""
    if len(body) > LOG_BODY_LIMIT:
        return None
    try:
        return json.loads(body) if body else {}
    except (ValueError, RecursionError):
        return UNPARSED


def _what(request: Any) -> str:
    """The A2A method and task id of a parsed JSON-RPC request, for the log line."""
    if request is UNPARSED:
        return "(unparsed body)"
    if not isinstance(request, dict) or not request:
        return ""
    params = request.get("params")
    params = params if isinstance(params, dict) else {}
    message = params.get("message")
    task_id = params.get("id") or (message.get("taskId") if isinstance(message, dict) else None)
    method = word(request.get("method", "?"))
    return f"{method} task={word(task_id)}" if task_id else method


def _node_viewer(seen: Seen) -> Caller | None:
    """A tailnet node the policy does not let in, as a viewer with no roles: the
    catalog lists the agent to it only if delegation.allowed_nodes names it."""
    peer = seen.peer
    if peer is None:
        return None
    return Caller(
        kind="tagged" if peer.tagged else "user",
        login="" if peer.tagged else peer.user.login,
        node=peer.node.name,
        tags=peer.node.tags,
        established_by=seen.established_by,
    )


@dataclass
class _Outcome:
    """What one request came to, for its access line; and the binding a refusal answers
    in ("plain" for the card, /healthz and the rest)."""

    binding: str
    caller: str = "anonymous"
    decision: str = "allowed"
    status: int = 0
    what: str = ""


async def _refuse(
    outcome: _Outcome, receive: Any, send: Any, status: int, reason: str, code: int, message: str
) -> None:
    """Answers a refused request in its binding's words, its body left unread (so the
    connection closes after it), and counts the refusal."""
    outcome.decision, outcome.status = f"refused: {message}", status
    REFUSALS.labels(reason.lower().replace(" ", "_")).inc()
    binding = outcome.binding
    await answer_unread(
        receive, send, lambda closing: _refusal(closing, binding, status, reason, code, message)
    )


def _count_and_log(scope: dict[str, Any], route: str, outcome: _Outcome) -> None:
    """The request's metric and its access line, however it ended."""
    REQUESTS.labels(route, str(outcome.status or 0)).inc()
    log.info(
        "%s %s %s%s -> %s %s",
        outcome.caller,
        scope["method"],
        path_as_sent(scope),
        f" {outcome.what}" if outcome.what else "",
        outcome.status or "-",
        outcome.decision,
    )


class AccessGuard:
    def __init__(
        self,
        app: Any,
        *,
        policy: Policy,
        resolver: Resolver,
        tokens: TokenStore,
        limits: BodyLimits,
        hosts: set[str],
        allowed_origins: tuple[str, ...],
        advertised_url: str,
        sessions: BrowserSessions | None = None,
        streams: StreamCounts,
        chains: ChainChecker | None = None,
    ) -> None:
        self._app = app
        self._chains = chains  # checks an actor chain (delegation/chain.py); None: none taken
        self._streams = streams
        self._policy = policy
        self._resolver = resolver
        self._tokens = tokens
        self._limits = limits
        self._hosts = {h.lower() for h in hosts}
        self._origins = set(allowed_origins)
        # A page opened at the advertised URL is this server's whatever Host reaches the
        # listener: the embedded node's TLS leaves no X-Forwarded-Proto to say https.
        self._advertised_origin = _origin_of_url(advertised_url)
        self._sessions = sessions
        # How the server tells busy from quiet: requests so far, and those not yet done.
        self.requests = 0
        self.in_flight = 0

    def _host_allowed(self, host_header: str, me: TailnetSelf) -> bool:
        name = _host_name(host_header)
        if name in self._hosts or name in me.addresses:
            return True
        # The full MagicDNS name, or the short one people type (http://agentbox/).
        return me.dns_name is not None and name in (me.dns_name, me.dns_name.split(".")[0])

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
        """Why a change to the page must be refused as coming from another site, if it
        must. GET changes nothing; a POST must come from the page's own origin, scheme,
        host and port alike: to a browser every port of a host is one site."""
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

    def _bearer(self, headers: dict[bytes, str]) -> TokenInfo | Refusal | None:
        authorization = headers.get(b"authorization", "")
        if not authorization:
            return None
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            return Refusal(401, "the Authorization header must be `Bearer <token>`")
        token = self._tokens.verify(value.strip())
        if token is None:
            return Refusal(401, "the bearer token is not valid (unknown or revoked)")
        return token

    async def _identify(
        self, scope: dict[str, Any], headers: dict[bytes, str], token: TokenInfo | None
    ) -> Caller | Refusal:
        try:
            seen = await self._resolver.seen(scope, headers.get(b"x-forwarded-for", ""))
        except BadForwarding as exc:
            return Refusal(401, str(exc))
        except LocalAPIUnavailable as exc:
            # While tailscaled is gone no tailnet peer can reach us: every caller is
            # local, and gets in only as a local caller can. Only a request that claims
            # a tailnet identity (tailscale serve's X-Forwarded-For) waits for tailscaled.
            claims = b"x-forwarded-for" in headers
            if claims and token is None and not self._policy.settings.local_without_token:
                log.warning("identity unavailable: %s", exc)
                return Refusal(
                    503, f"tailscaled cannot confirm the tailnet identity claimed now: {exc}"
                )
            # Said once in the log as it changes, not in every access line.
            where = self._resolver.localapi.where
            # Who the caller is (a local connection) is all the identity keeps; why no
            # tailnet identity could be asked is the refusal's advice, not its name.
            advice = f", LocalAPI unreachable: start {where} for tailnet callers"
            seen = Seen(None, "local connection", advice)
        chain = headers.get(CHAIN_HEADER)
        if chain is not None:  # work another box hands here for a person (access/delegated.py)
            this_node = (await self._resolver.current_self()).dns_name or ""
            return await delegated_caller(self._policy, self._chains, seen, chain, this_node)
        return self._policy.decide(seen, token)

    async def _who(
        self, scope: dict[str, Any], headers: dict[bytes, str], page: bool
    ) -> tuple[Caller | Refusal, bool]:
        """The caller, from the connection and the headers alone (no body is read for
        one that is not let in), and whether a bearer token verified."""
        token = self._bearer(headers)
        if isinstance(token, Refusal):
            identified: Caller | Refusal = token
        else:
            identified = await self._identify(scope, headers, token)
        if page and isinstance(identified, Refusal) and identified.status == 401:
            identified = self._signed_in(scope, headers, identified)
        return identified, isinstance(token, TokenInfo)

    async def _viewer(self, scope: dict[str, Any], headers: dict[bytes, str]) -> Caller | None:
        """The catalog's viewer, never a refusal: the caller the policy lets in, else the
        tailnet node whois names (no roles), else None."""
        identified, _ = await self._who(scope, headers, page=False)
        if isinstance(identified, Caller):
            return identified
        try:
            seen = await self._resolver.seen(scope, headers.get(b"x-forwarded-for", ""))
        except (BadForwarding, LocalAPIUnavailable):
            return None
        return _node_viewer(seen)

    def _signed_in(
        self, scope: dict[str, Any], headers: dict[bytes, str], refusal: Refusal
    ) -> Caller | Refusal:
        """A sign-in on this box, for a page request with no other identity: only the
        page's routes honour one; the A2A routes never do."""
        if self._sessions is not None:
            signed_in = self._sessions.caller(headers.get(b"cookie", ""), local_uid(scope))
            if signed_in is not None:
                return signed_in
        return Refusal(
            401,
            f"{refusal.reason}. In a browser on this box, sign in with the link that "
            "`tailagent web` prints",
        )

    async def _local_uid(self, scope: dict[str, Any], headers: dict[bytes, str]) -> int | None:
        """The unix user of a connection that a process on this box opened; None for
        what tailscale serve forwards (its socket is tailscaled's, its browser elsewhere)."""
        if b"x-forwarded-for" in headers:
            return None
        return await self._resolver.local_owner(scope)

    async def _take_body(
        self, receive: Any, declared: str, is_a2a: bool, path: str, caller: Caller
    ) -> tuple[bytes, Any] | BodyRefused:
        """The body of a request that was let in, within its limits; an A2A body's JSON
        shape checked too, a message's actor chain against its header's, and a JSON-RPC
        body parsed (see `_parsed`)."""
        body = await read_body(receive, declared, self._limits)
        if isinstance(body, BodyRefused):
            return body
        if not is_a2a:
            return body, {}
        refused = shape_refused(body, self._limits) or number_refused(body)
        if refused is None and caller.chain:
            refused = message_chain_refused(body, caller.chain)
        if refused is not None:
            return refused
        return body, _parsed(body) if path == JSONRPC_PATH else {}

    def _head_refused(
        self, scope: dict[str, Any], headers: dict[bytes, str], page: bool, is_a2a: bool
    ) -> tuple[int, str, int, str] | None:
        """Why the head alone refuses a request that is not public, before the caller is
        asked for: an Origin not allowed for a program, or an A2A POST that is not JSON."""
        origin = headers.get(b"origin")
        if not page and origin is not None and origin not in self._origins:
            return 403, "ORIGIN", 0, f"Origin {origin} is not in access.allowed_origins"
        if is_a2a and scope["method"] == "POST":
            content_type = headers.get(b"content-type", "").split(";")[0].strip().lower()
            length = headers.get(b"content-length", "")
            if content_type not in JSON_TYPES and (content_type or length not in ("", "0")):
                shown = content_type or "missing"
                message = f"Content-Type must be application/json, not {shown}"
                return 415, "CONTENT_TYPE_NOT_SUPPORTED", -32005, message
        return None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        self.requests += 1
        self.in_flight += 1
        path = scope["path"]
        route = route_of(path)
        headers = _headers(scope)
        page = is_page_request(scope)
        outcome = _Outcome("page" if page else route if route in ("jsonrpc", "rest") else "plain")
        is_a2a = outcome.binding in ("jsonrpc", "rest")
        try:
            if headers.get(b"tailscale-funnel-request"):
                message = "requests from Tailscale Funnel are refused"
                await _refuse(outcome, receive, send, 403, "FUNNEL", 0, message)
                return
            me = await self._resolver.current_self()
            self._policy.owner_login = me.owner_login
            if not self._host_allowed(headers.get(b"host", ""), me):
                message = f"Host {headers.get(b'host', '')!r} does not name this server"
                await _refuse(outcome, receive, send, 403, "HOST", 0, message)
                return
            if page:
                scope[UID_KEY] = await self._local_uid(scope, headers)
            if path in PUBLIC_PATHS or path == CATALOG_PATH:
                if path == CATALOG_PATH:
                    viewer = scope[VIEWER_KEY] = await self._viewer(scope, headers)
                    outcome.caller = viewer.describe() if viewer else outcome.caller
                outcome.decision = "public"
                await self._app(scope, receive, self._tracking(send, outcome, is_a2a))
                return
            refused = self._head_refused(scope, headers, page, is_a2a)
            if refused is not None:
                await _refuse(outcome, receive, send, *refused)
                return
            identified, token_verified = await self._who(scope, headers, page)
            if isinstance(identified, Refusal):
                error, reason = identified.error.upper(), identified.reason
                await _refuse(outcome, receive, send, identified.status, error, 0, reason)
                return
            cross = self._cross_site(scope["method"], headers, token_verified) if page else None
            if cross is not None:
                message = f"{cross} may not change anything here"
                await _refuse(outcome, receive, send, 403, "ORIGIN", 0, message)
                return
            outcome.caller = identified.describe()
            rpc: Any = {}
            if scope["method"] in ("POST", "PUT", "PATCH"):
                length = headers.get(b"content-length", "")
                taken = await self._take_body(receive, length, is_a2a, path, identified)
                if isinstance(taken, BodyRefused):
                    status, reason, message = taken.status, taken.reason, taken.message
                    await _refuse(outcome, receive, send, status, reason, taken.rpc_code, message)
                    return
                body, rpc = taken
                outcome.what = _what(rpc)
                receive = _replay(body, receive)
            scope[SCOPE_KEY] = identified
            if isinstance(rpc, dict):
                scope[RPC_KEY] = rpc
            # A stream holds its place until the request ends, however it ends.
            counted = opens_stream(path, rpc) and not identified.may("admin")
            if counted and not self._streams.take(identified.owner):
                message = self._streams.refusal(identified.owner)
                await _refuse(outcome, receive, send, 429, "TOO_MANY_STREAMS", 0, message)
                return
            try:
                await self._app(scope, receive, self._tracking(send, outcome, is_a2a))
            finally:
                if counted:
                    self._streams.give_back(identified.owner)
        except Exception:
            log.exception("unhandled error on %s %s", scope["method"], path)
            if not outcome.status:
                outcome.decision = "error"
                await send_json(send, 500, {"error": "internal error"})
        finally:
            self.in_flight -= 1
            _count_and_log(scope, route, outcome)

    @staticmethod
    def _tracking(send: Any, outcome: _Outcome, is_a2a: bool) -> Any:
        async def tracking_send(message: ASGISendEvent) -> None:
            if message["type"] == "http.response.start":
                outcome.status = message["status"]
                if is_a2a:
                    # a2a-sdk answers HTTP+JSON with application/a2a+json; the binding
                    # (and the TCK's MUST) want application/json.
                    message["headers"] = [
                        (k, b"application/json")
                        if k.lower() == b"content-type" and v.startswith(b"application/a2a+json")
                        else (k, v)
                        for k, v in message["headers"]
                    ]
            await send(message)

        return tracking_send
