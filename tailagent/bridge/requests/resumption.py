"""SubscribeToTask taken up again from the last event a client saw (A2A #1986).

A client that names its last number (the `metadata.sequence` of the last event it
got, as `Last-Event-ID` on the request or `lastSequence` in its JSON-RPC metadata) is
sent every event it missed, in order, each once, then the live ones. Without a number,
a subscription is the SDK's own.

Where the task runs decides where the live part comes from: on this server, from the
SDK's stream of the task (subscribed before the missed events are read, so none falls
between the two); on another server sharing the store, from the store, which that
server writes within a moment (store/events.py), read every POLL_INTERVAL; a task that
has ended gets what it missed and the stream ends. A number older than what the store
keeps gets the task's snapshot first, marked `replay: snapshot`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable

from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.types.a2a_pb2 import Task, TaskState, TaskStatusUpdateEvent
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError
from google.protobuf.struct_pb2 import Value

from tailagent.store.events import Numbered, TaskEvents, sequence_of
from tailagent.store.finality import BUSY_STATES, ENDED_STATES
from tailagent.store.signals import POLL_INTERVAL
from tailagent.store.tasks import CoalescingTaskStore

LAST_EVENT_HEADER = "last-event-id"
LAST_SEQUENCE_KEY = "lastSequence"
REPLAY_KEY = "replay"
# A stream of another server's task ends where the SDK's live one would: at the end,
# or where the task waits for someone.
STOPS = (*ENDED_STATES, TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED)

Live = Callable[[], AsyncGenerator[Event, None]]


def last_seen(context: ServerCallContext) -> int | None:
    """The number the client saw last: its `Last-Event-ID` header, else the
    `metadata.lastSequence` of its JSON-RPC request (A2A's SubscribeToTask has no
    metadata field, so the SDK drops it; the guard's parse of the body keeps it).
    None: it named none."""
    headers = context.state.get("headers") or {}
    given, named = headers.get(LAST_EVENT_HEADER), "Last-Event-ID"
    if given is None:
        given, named = _in_metadata(context.state.get("rpc")), f"metadata.{LAST_SEQUENCE_KEY}"
    if given is None:
        return None
    text = str(given).strip()
    # JSON gives the number as 12 or, through protobuf's Struct, as 12.0: both are 12.
    whole = text.removesuffix(".0")
    if not whole.isdigit() or len(whole) > 18:
        raise InvalidParamsError(
            message=f"{named} must be the number of the last event seen, not {text!r}"
        )
    return int(whole)


def _in_metadata(rpc: object) -> object:
    params = rpc.get("params") if isinstance(rpc, dict) else None
    metadata = params.get("metadata") if isinstance(params, dict) else None
    return metadata.get(LAST_SEQUENCE_KEY) if isinstance(metadata, dict) else None


def snapshot(task: Task) -> Task:
    """The task as it is now, marked as standing in for events no longer kept."""
    copy = Task()
    copy.CopyFrom(task)
    copy.metadata.fields[REPLAY_KEY].CopyFrom(Value(string_value="snapshot"))
    return copy


def _stops(event: Numbered) -> bool:
    return isinstance(event, TaskStatusUpdateEvent) and event.status.state in STOPS


class Resumption:
    def __init__(self, store: CoalescingTaskStore, events: TaskEvents) -> None:
        self._store = store
        self._events = events

    async def follow(
        self,
        task_id: str,
        after: int,
        context: ServerCallContext,
        live: Live | None,
    ) -> AsyncGenerator[Event, None]:
        """What the client missed after `after`, then what comes. `live` is the SDK's
        subscription when this server runs the task (None: another server does). A task
        that waits for someone or has ended is served from the store, as the SDK's own
        subscription would not be."""
        stored = await self._store.get(task_id, context)
        if stored is None:
            raise TaskNotFoundError
        if live is not None and stored.status.state in BUSY_STATES:
            async for event in self._here(stored, after, live):
                yield event
            return
        async for event in self._from_store(stored, after, context):
            yield event

    async def _here(self, stored: Task, after: int, live: Live) -> AsyncGenerator[Event, None]:
        stream = live()
        try:
            first = await anext(stream)  # the task now: the subscription is in place
            replay = await self._events.since(stored.id, after)
            if replay.gap:
                yield snapshot(first if isinstance(first, Task) else stored)
                replay.events = []
            for event in replay.events:
                yield event
            seen = replay.last
            async for event in stream:
                number = sequence_of(event)
                if number is not None and number <= seen:
                    continue
                if isinstance(event, Task):
                    continue  # the SDK's snapshot again: this stream sends what changed
                yield event
        finally:
            await stream.aclose()

    async def _from_store(
        self, stored: Task, after: int, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        """Events as the store has them, until the task ends or waits for someone. A
        task read as ended is read once more a moment later: its last events may still
        be on their way from the server that ran it; if none ends it, its snapshot does
        (a restart closed it, with no event)."""
        replay = await self._events.since(stored.id, after)
        if replay.gap:
            yield snapshot(stored)
            if stored.status.state in STOPS:
                return
            replay.events = []
        ended_before = False
        while True:
            for event in replay.events:
                yield event
            if replay.events and _stops(replay.events[-1]):
                return  # where the task is now (an earlier wait, answered since, is not)
            task = await self._store.get(stored.id, context)
            ended = task is None or task.status.state in ENDED_STATES
            if ended and ended_before:
                if task is not None:
                    yield snapshot(task)
                return
            ended_before = ended
            await asyncio.sleep(POLL_INTERVAL)
            replay = await self._events.since(stored.id, replay.last)
