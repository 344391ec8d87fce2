"""Each streamed event's number as its SSE `id:` line, so any SSE client resumes by itself.

A task's status and artifact updates are numbered (store/events.py, `metadata.sequence`),
and a stream cut short is taken up again from the number a client names in
`Last-Event-ID` (bridge/requests/resumption.py). SSE has a standard place for that
number: the `id:` line, which a browser's `EventSource` (and any client that follows
the SSE standard) remembers and sends back as `Last-Event-ID` when it reconnects by
itself. a2a-sdk 1.3.0 writes its frames with `data:` (and `event: error`) only.

Every SSE answer of a2a-sdk (SendStreamingMessage and SubscribeToTask, on the JSON-RPC
and HTTP+JSON bindings, 1.0 and 0.3) is made by `create_event_source_response`, which
its four dispatcher modules import by name; in each, that name is given one that reads
each frame's event and adds its number as the frame's `id`. A task or a message
carries no number of its own, and its frame no `id` (SSE keeps the last one: a
client that reconnects after it names the last numbered event it had). The number is
read from the frame's JSON, the only place the SDK leaves it, and only the event's own
`metadata.sequence` counts (not a message's metadata inside it, which a caller wrote);
frames with no "sequence" in them are not parsed.

Replacing the name the private dispatcher modules hold is a mend (mends/versions.py):
for a2a-sdk 1.3.0 only, applied when this module is imported (app.py imports it).
Without it a stream's frames carry no `id:`, and a client resumes only from the
number it reads in `metadata.sequence` and sends itself.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import AsyncIterable, AsyncIterator, Callable
from typing import Any

from sse_starlette.sse import ServerSentEvent

from tailagent.mends.versions import Mend, applies

SSE_IDS_MEND = Mend(
    what="a2a-sdk's SSE frames carrying each event's number as their id (mends/sse_ids.py)",
    dist="a2a-sdk",
    written_for=("1.3.0",),
    without="streamed events carry their number only in metadata.sequence, and an "
    "EventSource that reconnects starts over",
)
# The modules that make a2a-sdk's SSE answers, each holding its own name for the maker.
WRITERS = (
    "a2a.server.routes.jsonrpc_dispatcher",
    "a2a.server.routes.rest_dispatcher",
    "a2a.compat.v0_3.jsonrpc_adapter",
    "a2a.compat.v0_3.rest_adapter",
)
MAKER = "create_event_source_response"
# Where a numbered event sits in a frame: under a JSON-RPC `result`, as a 1.0
# StreamResponse's member, or as a 0.3 event with its `kind`.
UPDATES = ("statusUpdate", "artifactUpdate")
KINDS_0_3 = ("status-update", "artifact-update")


def event_number(data: str) -> int | None:
    """The number of the event a frame's JSON carries; None for a task, a message, an
    error, or anything else."""
    if '"sequence"' not in data:
        return None
    try:
        frame = json.loads(data)
    except ValueError:
        return None
    event = frame.get("result", frame) if isinstance(frame, dict) else None
    if not isinstance(event, dict):
        return None
    member = next((event[key] for key in UPDATES if key in event), None)
    if member is not None:
        event = member
    elif event.get("kind") not in KINDS_0_3:
        return None
    metadata = event.get("metadata") if isinstance(event, dict) else None
    number = metadata.get("sequence") if isinstance(metadata, dict) else None
    if isinstance(number, bool) or not isinstance(number, int | float):
        return None
    return int(number)


def numbered(item: Any) -> Any:
    """One frame as the SDK made it (a dict of fields, a ServerSentEvent, or the data
    alone), with its event's number as its `id` where it has one."""
    if isinstance(item, ServerSentEvent):
        number = event_number(item.data) if isinstance(item.data, str) else None
        if number is not None and item.id is None:
            item.id = str(number)
        return item
    if isinstance(item, dict):
        data = item.get("data")
        number = event_number(data) if isinstance(data, str) else None
        return item if number is None or "id" in item else {**item, "id": str(number)}
    if isinstance(item, str):
        number = event_number(item)
        return item if number is None else {"data": item, "id": str(number)}
    return item


async def _numbering(content: AsyncIterable[Any]) -> AsyncIterator[Any]:
    iterator = aiter(content)
    try:
        async for item in iterator:
            yield numbered(item)
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()  # the SDK's stream, and the task subscription it holds


def numbering(make: Callable[..., Any]) -> Callable[..., Any]:
    """The SDK's `create_event_source_response`, its frames numbered."""

    def create_event_source_response(content: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(content, AsyncIterable):
            content = _numbering(content)
        return make(content, *args, **kwargs)

    create_event_source_response.mended = True  # type: ignore[attr-defined]
    return create_event_source_response


def number_sse_frames() -> None:
    """In each of the SDK's SSE writers, its maker of answers numbers their frames."""
    for name in WRITERS:
        module = importlib.import_module(name)
        make = getattr(module, MAKER)
        if not getattr(make, "mended", False):
            setattr(module, MAKER, numbering(make))


if applies(SSE_IDS_MEND):
    number_sse_frames()
