"""The rules of the routes programs call (A2A's, the card's, /metrics), apart from the
browser's (the desk's mount keeps its own: web/browser_rules.py), in the spirit of
Tailscale's safeweb API mux.

A page open in a browser on the tailnet must not drive the agent: a request carrying
an `Origin` is refused unless `access.allowed_origins` names it. An A2A POST carries
JSON, never a form a page could send. An A2A body must be one the SDK parses without
stalling the event loop (bodies.py), and a message's actor chain must be the one its
header carried. A2A answers say `application/json`, as the binding wants.
"""

from __future__ import annotations

import json
from typing import Any

from tailagent.access.asgi import A2A_BINDINGS, ASGI, headers_of, outcome_of, replay
from tailagent.access.bodies import BodyLimits, number_refused, shape_refused
from tailagent.access.delegated import message_chain_refused
from tailagent.access.guard import is_public
from tailagent.access.identity import RPC_KEY, SCOPE_KEY, Caller
from tailagent.access.logline import word
from tailagent.access.refusals import refuse
from tailagent.access.streams import PARSED_KEY

JSON_TYPES = ("application/json", "application/a2a+json")
JSONRPC_PATH = "/"
# A body is parsed for the log line's method and task, and to tell a stream, only up
# to this size: a large one (an attachment) would be parsed twice, here and by the SDK.
LOG_BODY_LIMIT = 64 * 1024
UNPARSED = object()  # a JSON-RPC body that is not JSON


class ProgramOrigins:
    """Refuses, from the head alone and before the caller is asked for, a request to a
    route that is not public whose `Origin` is not one of `allowed`."""

    def __init__(self, app: ASGI, *, allowed: tuple[str, ...]) -> None:
        self._app = app
        self._allowed = set(allowed)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not is_public(scope["path"]):
            origin = headers_of(scope).get(b"origin")
            if origin is not None and origin not in self._allowed:
                message = f"Origin {origin} is not in access.allowed_origins"
                await refuse(scope, receive, send, 403, "ORIGIN", 0, message)
                return
        await self._app(scope, receive, send)


class JsonOnly:
    """Refuses, from the head alone, an A2A POST whose body is not said to be JSON."""

    def __init__(self, app: ASGI) -> None:
        self._app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if _a2a(scope) and not is_public(scope["path"]) and scope["method"] == "POST":
            headers = headers_of(scope)
            content_type = headers.get(b"content-type", "").split(";")[0].strip().lower()
            length = headers.get(b"content-length", "")
            if content_type not in JSON_TYPES and (content_type or length not in ("", "0")):
                shown = content_type or "missing"
                message = f"Content-Type must be application/json, not {shown}"
                await refuse(
                    scope, receive, send, 415, "CONTENT_TYPE_NOT_SUPPORTED", -32005, message
                )
                return
        await self._app(scope, receive, send)


class A2ABodies:
    """The body of an A2A request the guard let in, read whole by `BodyLimit` in front:
    its JSON shape within `limits`, no number JSON has not, a message's actor chain the
    header's. A JSON-RPC body is parsed once here, for the access line, the stream count
    (streams.py's PARSED_KEY) and the JSON-RPC route (identity.py's RPC_KEY)."""

    def __init__(self, app: ASGI, *, limits: BodyLimits) -> None:
        self._app = app
        self._limits = limits

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        caller = scope.get(SCOPE_KEY)
        if not _a2a(scope) or not isinstance(caller, Caller):  # not A2A, or a public route
            await self._app(scope, receive, send)
            return
        rpc: Any = {}
        if scope["method"] in ("POST", "PUT", "PATCH"):
            body = await _whole(receive)
            refused = shape_refused(body, self._limits) or number_refused(body)
            if refused is None and caller.chain:
                refused = message_chain_refused(body, caller.chain)
            if refused is not None:
                status, reason, message = refused.status, refused.reason, refused.message
                await refuse(scope, receive, send, status, reason, refused.rpc_code, message)
                return
            rpc = _parsed(body) if scope["path"] == JSONRPC_PATH else {}
            outcome_of(scope).what = _what(rpc)
            receive = replay(body, receive)
        scope[PARSED_KEY] = rpc
        if isinstance(rpc, dict):
            scope[RPC_KEY] = rpc
        await self._app(scope, receive, send)


class A2AJsonType:
    """a2a-sdk answers HTTP+JSON with application/a2a+json; the binding (and the TCK's
    MUST) want application/json."""

    def __init__(self, app: ASGI) -> None:
        self._app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not _a2a(scope):
            await self._app(scope, receive, send)
            return

        async def json_typed(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    (k, b"application/json")
                    if k.lower() == b"content-type" and v.startswith(b"application/a2a+json")
                    else (k, v)
                    for k, v in message["headers"]
                ]
            await send(message)

        await self._app(scope, receive, json_typed)


def _a2a(scope: dict[str, Any]) -> bool:
    return scope["type"] == "http" and outcome_of(scope).binding in A2A_BINDINGS


async def _whole(receive: Any) -> bytes:
    body = bytearray()
    while True:
        message = await receive()
        body += message.get("body", b"")
        if message["type"] != "http.request" or not message.get("more_body"):
            return bytes(body)


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
