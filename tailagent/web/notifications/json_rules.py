"""The rules of Web Push's JSON routes: what a body may be, and how a refusal reads.

In the spirit of safeweb's API mux, these routes are not browser pages: they take a
bounded JSON object only (never a form), and a refusal is `{"error": ...}` with its
status, not a page. The subscription routes and a notification's answer share them.
"""

from __future__ import annotations

import json
from typing import Any

from quart import request

MAX_JSON = 8 * 1024  # a subscription is a few hundred bytes


class PushRefused(Exception):
    """A push request the server will not act on; str() is the JSON error's text."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def json_body() -> dict[str, Any]:
    """The request's JSON object, refused unless it is one, small, and said to be JSON."""
    kind = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise PushRefused(415, "this takes application/json")
    raw = await request.get_data()
    if len(raw) > MAX_JSON:
        raise PushRefused(413, f"this takes {MAX_JSON} bytes at most")
    try:
        body = json.loads(raw)
    except ValueError:
        raise PushRefused(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise PushRefused(400, "the body is a JSON object")
    return body
