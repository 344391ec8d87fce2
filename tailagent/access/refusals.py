"""A refused request, answered in the words of its binding: a page a person reads in a
browser, an error in the JSON-RPC or HTTP+JSON binding's shape, else plain JSON.

Every middleware of the access layer refuses through `refuse`, so a refusal reads the
same whichever layer said no, is counted once, records its reason for the access
line, and leaves the body unread (`answer_unread`).

The page: the access layer answers before the desk's app runs, so it cannot come from
the desk's templates; it still has to look like the desk and speak to whoever holds
the browser, often a phone: the one thing to do first, in plain words, and the access
layer's own reason (tailscaled, tokens, settings) kept in a "Details" part for whoever
runs the server. Its stylesheet is the desk's, which the guard serves to anyone
(guard.py's PUBLIC_PATHS): the same file for everyone, with nothing in it about anyone.
"""

from __future__ import annotations

import asyncio
import html
import json
from typing import Any

from hypercorn.typing import ASGIReceiveEvent

from tailagent.access.asgi import outcome_of
from tailagent.output.metrics import REFUSALS

INVALID_REQUEST = -32600  # JSON-RPC's code for a request not taken (no method ran)
# An over-limit body from a caller that was let in is read on and dropped up to this,
# so its client reads the 413 rather than a reset; beyond it the connection is cut.
DISCARD_LIMIT = 64 * 1024 * 1024
# How long a refusal sent before the body was read waits for Hypercorn to let go of it.
LET_GO_SECONDS = 1.0

STYLESHEET = "/desk/static/desk.css"
# The page loads the desk's stylesheet and nothing else: no script, no image, no frame.
CSP = b"default-src 'none'; style-src 'self'; frame-ancestors 'none'"

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

SIGN_IN_TITLE = "Sign in to the approval desk"
SIGN_IN_WORDS = (
    "<p>This desk knows you by your Tailscale account, and this browser did not come "
    "with one it could check.</p>"
    "<p><strong>On a phone or another computer:</strong> switch Tailscale on, signed in "
    "to the same tailnet as the server, and open the desk at the address you were "
    "given.</p>"
    "<p><strong>On the computer that runs tailagent:</strong> run "
    "<code>tailagent web</code> in a terminal there and open the link it prints "
    "(<code>tailagent web --open</code> opens it for you). The link works once, for a "
    "few minutes.</p>"
)


def refusal_page(status: int, title: str, reason: str) -> bytes:
    """The whole page: for a 401 (no identity), how to sign in, the reason under
    Details; for any other refusal, its title and its reason, which already name what
    to change."""
    if status == 401:
        heading, body = SIGN_IN_TITLE, f'<div class="refusal signin">{SIGN_IN_WORDS}</div>'
        body += (
            f'<details class="why"><summary>Details</summary><p>{html.escape(reason)}</p></details>'
        )
    else:
        heading = title[:1].upper() + title[1:]
        body = f'<div class="refusal"><p>{html.escape(reason)}</p></div>'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(heading)} · tailagent</title>"
        f'<link rel="stylesheet" href="{STYLESHEET}"></head><body>'
        '<nav class="bar"><a href="/desk/" class="home">tailagent</a></nav>'
        f"<main><h1>{html.escape(heading)}</h1>{body}</main></body></html>"
    ).encode()


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
            (b"content-security-policy", CSP),
            (b"x-content-type-options", b"nosniff"),
        ],
    )


async def send_json(
    send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    content_type = (b"content-type", b"application/json")
    await _send(send, status, json.dumps(body).encode(), [content_type, *(headers or [])])


async def _answer(
    send: Any, binding: str, status: int, reason: str, code: int, message: str
) -> None:
    """A refusal in the words of the binding it answers: a page for a person, else
    JSON in the binding's shape (with `WWW-Authenticate` when credentials would help)."""
    if binding == "page":
        await send_page(send, status, ERROR_WORDS.get(status, "refused"), message)
        return
    extra = [(b"www-authenticate", b"Bearer")] if status == 401 else []
    await send_json(send, status, refusal_body(status, reason, code, message, binding), extra)


async def refuse(
    scope: dict[str, Any],
    receive: Any,
    send: Any,
    status: int,
    reason: str,
    code: int,
    message: str,
) -> None:
    """Answers a refused request in its binding's words, its body left unread (so the
    connection closes after it), and counts the refusal. `reason` names it (the
    metric's label, AIP-193's ErrorInfo reason); `code` is its JSON-RPC error code (0:
    the access layer's own)."""
    outcome = outcome_of(scope)
    outcome.decision, outcome.status = f"refused: {message}", status
    REFUSALS.labels(reason.lower().replace(" ", "_")).inc()
    binding = outcome.binding
    await answer_unread(
        receive, send, lambda closing: _answer(closing, binding, status, reason, code, message)
    )


async def discard(receive: Any, limit: int) -> None:
    """Reads what the client still sends and keeps none of it: until the request
    ends, the connection is let go of, or `limit` bytes have passed."""
    seen = 0
    while seen <= limit:
        message: ASGIReceiveEvent = await receive()
        if message["type"] != "http.request" or not message.get("more_body"):
            return
        seen += len(message.get("body", b""))


def _closing(send: Any) -> Any:
    """`send`, with the response's head saying `Connection: close`."""

    async def send_closing(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            headers = [*message.get("headers", ()), (b"connection", b"close")]
            message = {**message, "headers": headers}
        await send(message)

    return send_closing


async def answer_unread(receive: Any, send: Any, answer: Any) -> None:
    """Sends `answer(send)` (a refusal) for a request whose body nobody read.

    The body is not read, but what arrives meanwhile is taken and dropped: Hypercorn
    queues a body for the app (ten chunks), and when the answer ends it queues its own
    word that the request is over; with the queue full of a body nobody takes, that
    word, and the answer with it, would wait forever. Once the answer is out Hypercorn
    closes a connection whose body is still coming, so this never reads much, and it
    says nothing of it: the answer's head says `Connection: close`, or a client keeping
    the connection alive sends its next request into the close ("Server disconnected
    without sending a response", seen once in a suite run under load)."""
    taking = asyncio.ensure_future(discard(receive, DISCARD_LIMIT))
    try:
        await answer(_closing(send))
        await asyncio.wait([taking], timeout=LET_GO_SECONDS)
    finally:
        taking.cancel()
