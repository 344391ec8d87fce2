"""What the access layer's middlewares share: a request's headers, the record of how it
ended, the body handed on once read, and layers stacked as a request meets them.

Each middleware is a plain ASGI class with one concern, as Starlette's are; none
knows which come before or after it. What one learns that another needs travels in
the request's scope: the caller (identity.py's keys) and this `Outcome`, which the
outermost (logline.py's `AccessLog`) makes and writes the access line from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hypercorn.typing import ASGIReceiveEvent

ASGI = Any  # (scope, receive, send) -> None, as Hypercorn calls it
OUTCOME_KEY = "tailagent.outcome"
HEADERS_KEY = "tailagent.headers"
A2A_BINDINGS = ("jsonrpc", "rest")


@dataclass
class Outcome:
    """What one request came to, for its access line; and the binding a refusal answers
    in: "page" for a person's browser, "jsonrpc" or "rest" for A2A, "plain" for the
    card, /healthz and the rest."""

    binding: str
    caller: str = "anonymous"
    decision: str = "allowed"
    status: int = 0
    what: str = ""


def outcome_of(scope: dict[str, Any]) -> Outcome:
    outcome = scope.get(OUTCOME_KEY)
    if not isinstance(outcome, Outcome):  # AccessLog makes one for every request
        raise RuntimeError("a request reached the access layer's middlewares without AccessLog")
    return outcome


def headers_of(scope: dict[str, Any]) -> dict[bytes, str]:
    """Request headers by lower-case name; a repeated header keeps every value. Read
    once per request, by the first layer that asks; no layer changes them."""
    found = scope.get(HEADERS_KEY)
    if isinstance(found, dict):
        return found
    found = {}
    for key, value in scope.get("headers", ()):
        name = key.lower()
        text = value.decode("latin-1")
        found[name] = f"{found[name]}, {text}" if name in found else text
    scope[HEADERS_KEY] = found
    return found


def replay(body: bytes, receive: Any) -> Any:
    """A receive() that yields the buffered body once, then defers to the real one."""
    sent = False

    async def replayed() -> ASGIReceiveEvent:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def layered(app: ASGI, *layers: Callable[[ASGI], ASGI]) -> ASGI:
    """`app` behind `layers`, the first the outermost: listed as a request meets them."""
    for layer in reversed(layers):
        app = layer(app)
    return app
