"""The access line: one per request, however it ends, and its fields each one field as
the request sent it.

`AccessLog` is the outermost layer: it counts the request (how the server tells busy
from quiet), makes its `Outcome` for the layers behind to fill in, answers an error
nobody handled with a 500, and writes the line and the request's metric at the end.

The log formatter (tailagent/output/logs.py) keeps every record on one line with its
controls escaped; this keeps a field from passing for others of the same line: a
path keeps its percent-encoding (`%20`, `%0a`: no space, no newline, as sent), and a
JSON-RPC method or task id that is not a plain word is quoted, so `GetTask -> 200
allowed` sent as a method cannot read as the request's own outcome.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

from hypercorn.typing import ASGISendEvent

from tailagent.access.asgi import A2A_BINDINGS, ASGI, OUTCOME_KEY, Outcome
from tailagent.access.refusals import send_json
from tailagent.output.metrics import REQUESTS, route_of

log = logging.getLogger("tailagent.access")

_PLAIN = re.compile(r"[\w.:/@+=?-]+")


def path_as_sent(scope: dict[str, Any]) -> str:
    """The request's path before percent-decoding (ASGI's raw_path), else its path."""
    raw = scope.get("raw_path")
    if isinstance(raw, bytes) and raw:
        return raw.decode("ascii", "backslashreplace")
    return str(scope["path"])


def word(value: object) -> str:
    """`value` as one field: itself when it is a plain word, else quoted (JSON)."""
    text = str(value)
    return text if _PLAIN.fullmatch(text) else json.dumps(text)


class AccessLog:
    """Every request counted, one access line and one metric each. `is_page` tells a
    person's browser (refusals answered as pages) from a program."""

    def __init__(self, app: ASGI, *, is_page: Callable[[dict[str, Any]], bool]) -> None:
        self._app = app
        self._is_page = is_page
        # How the server tells busy from quiet: requests so far, and those not yet done.
        self.requests = 0
        self.in_flight = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        self.requests += 1
        self.in_flight += 1
        route = route_of(scope["path"])
        binding = route if route in A2A_BINDINGS else "plain"
        outcome = scope[OUTCOME_KEY] = Outcome("page" if self._is_page(scope) else binding)
        try:
            await self._app(scope, receive, _tracking(send, outcome))
        except Exception:
            log.exception("unhandled error on %s %s", scope["method"], scope["path"])
            if not outcome.status:
                outcome.decision = "error"
                await send_json(send, 500, {"error": "internal error"})
        finally:
            self.in_flight -= 1
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


def _tracking(send: Any, outcome: Outcome) -> Any:
    """`send`, noting the response's status in the outcome."""

    async def tracking_send(message: ASGISendEvent) -> None:
        if message["type"] == "http.response.start":
            outcome.status = message["status"]
        await send(message)

    return tracking_send
