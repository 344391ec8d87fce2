"""Streams per caller: which requests open one, and how many each caller holds.

A stream (server-sent events: A2A's streamed sends and subscriptions, the desk's live
pages) keeps its connection, one file descriptor, for as long as it lasts. Unbounded,
one caller's thousand streams took a server's 1,024 descriptors, and every other
caller got 503 (tailscaled could no longer be asked who they were). So the access
layer counts them per caller and answers one past `max_streams_per_caller` with 429
before anything of it runs; the place is given back when the request ends, however
it ends: the stream ran out, its client went away, the server stopped it.

The caller is `Caller.owner`, the name its tasks are stored under: a login, whatever
device or token it comes with; a tagged node's tags; a token's name. Admins are not
counted: the box is theirs, and the benches open a thousand streams.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from tailagent.access.asgi import ASGI
from tailagent.access.identity import SCOPE_KEY, Caller
from tailagent.access.refusals import refuse

# The scope key: a JSON-RPC body as the access layer parsed it (api_rules.py), or None
# for one too large to parse there; absent where no body was parsed.
PARSED_KEY = "tailagent.parsed"

# The JSON-RPC methods that answer with a stream, in A2A 1.0 and 0.3.
STREAM_METHODS = frozenset(
    {"SendStreamingMessage", "SubscribeToTask", "message/stream", "tasks/resubscribe"}
)
# The HTTP+JSON routes that do (also under 0.3's /v1), and the desk's live pages.
_STREAM_PATH = re.compile(
    r"(?:/v1)?/(?:message:stream|tasks/[^/]+:subscribe)|/desk/events|/desk/tasks/[^/]+/events"
)


def opens_stream(path: str, rpc: Any) -> bool:
    """Whether a request opens a stream. `rpc` is a JSON-RPC request's parsed body, or
    None for one too large to be parsed by the access layer: that is a message send
    with attachments, and counts, since its connection lasts as long as a stream's
    (to the turn's end) whatever its method; telling would take a second parse of
    up to 4 MiB."""
    if path == "/":  # the JSON-RPC route
        return rpc is None or (isinstance(rpc, dict) and rpc.get("method") in STREAM_METHODS)
    return _STREAM_PATH.fullmatch(path) is not None


class StreamCounts:
    """The streams each caller holds open on this server."""

    def __init__(self, per_caller: int) -> None:
        self.per_caller = per_caller
        self._held: Counter[str] = Counter()

    def held(self, caller: str) -> int:
        return self._held[caller]

    def take(self, caller: str) -> bool:
        """Takes a place for one more stream of the caller's, if it has one left."""
        if self._held[caller] >= self.per_caller:
            return False
        self._held[caller] += 1
        return True

    def give_back(self, caller: str) -> None:
        self._held[caller] -= 1
        if self._held[caller] <= 0:
            del self._held[caller]

    def refusal(self, caller: str) -> str:
        return (
            f"{caller} holds {self._held[caller]} open streams, as many as one caller may "
            f"(max_streams_per_caller = {self.per_caller}): close one first (a stream that "
            "ends or is closed frees its place), or read tasks with GetTask"
        )


class StreamCaps:
    """Answers a caller's stream past `counts.per_caller` with 429 before anything of
    it runs, and gives its place back when the request ends, however it ends."""

    def __init__(self, app: ASGI, *, counts: StreamCounts) -> None:
        self._app = app
        self._counts = counts

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        caller = scope.get(SCOPE_KEY)
        if scope["type"] != "http" or not isinstance(caller, Caller):  # a public route
            await self._app(scope, receive, send)
            return
        counted = opens_stream(scope["path"], scope.get(PARSED_KEY, {}))
        counted = counted and not caller.may("admin")
        if counted and not self._counts.take(caller.owner):
            message = self._counts.refusal(caller.owner)
            await refuse(scope, receive, send, 429, "TOO_MANY_STREAMS", 0, message)
            return
        try:
            await self._app(scope, receive, send)
        finally:
            if counted:
                self._counts.give_back(caller.owner)
