"""The ASGI layer in front of every route: request hygiene and the caller.

It runs before any A2A code, so a refusal here costs nothing deeper. This issue
establishes every caller as local; the tailnet identity (LocalAPI whois) slots in
at `_caller` without touching anything behind it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from hypercorn.typing import ASGIReceiveEvent, ASGISendEvent

from tailagent.access.identity import LOCAL_CALLER, SCOPE_KEY, Caller

log = logging.getLogger(__name__)

JSON_TYPES = ("application/json", "application/a2a+json")
JSONRPC_PATH = "/"
DISCARD_LIMIT = 64 * 1024 * 1024


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


def _header(scope: dict[str, Any], name: bytes) -> str:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return value.decode("latin-1")
    return ""


def _is_a2a_rest(path: str) -> bool:
    return path.startswith(("/message:", "/tasks", "/extendedAgentCard", "/v1/"))


def jsonrpc_error(code: int, message: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}


def rest_error(status: int, reason: str, message: str) -> dict[str, Any]:
    """An AIP-193 error body, the shape the HTTP+JSON binding uses."""
    return {
        "error": {
            "code": status,
            "status": reason,
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


async def send_json(send: Any, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class AccessGuard:
    def __init__(self, app: Any, *, max_body_bytes: int) -> None:
        self._app = app
        self._max_body = max_body_bytes

    async def _read_body(self, receive: Any, declared: str) -> bytes | None:
        """The whole request body, or None when it is over the limit (with or without
        a Content-Length). A refused body is drained, up to a bound, so a client still
        sending reads the 413 instead of a reset connection."""
        too_large = declared.isdigit() and int(declared) > self._max_body
        if too_large and int(declared) > DISCARD_LIMIT:
            return None
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return None
            body += message.get("body", b"")
            if len(body) > self._max_body:
                too_large = True
                if len(body) > DISCARD_LIMIT:
                    return None
            if not message.get("more_body"):
                return None if too_large else bytes(body)

    def _caller(self, scope: dict[str, Any]) -> Caller:
        return LOCAL_CALLER

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        path = scope["path"]
        is_rpc = path == JSONRPC_PATH
        is_a2a = is_rpc or _is_a2a_rest(path)

        async def refuse(status: int, reason: str, code: int, message: str) -> None:
            body = jsonrpc_error(code, message) if is_rpc else rest_error(status, reason, message)
            await send_json(send, status, body)

        length = _header(scope, b"content-length")
        if is_a2a and scope["method"] == "POST":
            content_type = _header(scope, b"content-type").split(";")[0].strip().lower()
            if content_type not in JSON_TYPES and (content_type or length not in ("", "0")):
                await refuse(
                    415,
                    "CONTENT_TYPE_NOT_SUPPORTED",
                    -32005,
                    f"Content-Type must be application/json, not {content_type or 'missing'}",
                )
                return

        scope[SCOPE_KEY] = self._caller(scope)
        if scope["method"] in ("POST", "PUT", "PATCH"):
            # Read the whole body here, within the limit, before any handler parses it.
            body = await self._read_body(receive, length)
            if body is None:
                await refuse(
                    413,
                    "PAYLOAD_TOO_LARGE",
                    -32600,
                    f"Request body too large (limit {self._max_body} bytes)",
                )
                return
            receive = _replay(body, receive)
        started = False

        async def rewriting_send(message: ASGISendEvent) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
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

        try:
            await self._app(scope, receive, rewriting_send)
        except Exception:
            log.exception("unhandled error on %s %s", scope["method"], path)
            if not started:
                await refuse(500, "INTERNAL", -32603, "Internal error")
