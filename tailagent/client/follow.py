"""Showing a task's events as they come, and the rest when the stream stops first
(taken up again from the last event seen, or the task's state): shared by `call` and
`watch`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
from a2a.client import A2AClientError, Client, ClientCallContext
from a2a.types.a2a_pb2 import GetTaskRequest, StreamResponse, SubscribeToTaskRequest
from a2a.utils.errors import A2AError, TaskNotFoundError

from tailagent.client.errors import complain, reason
from tailagent.client.render import (
    Changes,
    Outcome,
    Renderer,
    json_of,
    sequence_of,
    status_event,
)

# A dropped stream is taken up again this many times, the wait doubling from
# FIRST_WAIT up to LONGEST_WAIT (about 25 s in all: a server's restart, a network's
# hiccup; not an outage, which the last line then reports).
TRIES = 8
FIRST_WAIT = 0.5
LONGEST_WAIT = 4.0

Show = Callable[[StreamResponse], None]


def printer(renderer: Renderer, outcome: Outcome, *, as_json: bool = False) -> Show:
    """Each event observed, then rendered (or printed as one JSON line: the one that
    ends the task with changes on its branch says so in a `changes` field, as the
    rendered call's last line does)."""

    def show(event: StreamResponse) -> None:
        outcome.observe(event)
        if as_json:
            line = json_of(event)
            if changes := Changes.of(outcome, renderer.target_args):
                line["changes"] = changes.as_json()
            print(json.dumps(line), flush=True)
        else:
            renderer.event(event, outcome)

    return show


async def take_up(
    client: Client, outcome: Outcome, show: Show, url: str, cut: BaseException | None
) -> None:
    """The stream ended before the task did (a connection dropped, a server stopping):
    subscribe again from the last event seen, so the rest shows and nothing twice,
    saying so in one line on stderr; a server that numbers no events, or one that stays
    away, leaves the task's stored state as the answer."""
    if not outcome.sequence:
        await read_the_end(client, outcome, show, url, cut)
        return
    why = f" ({reason(cut)})" if cut is not None else ""
    complain(
        f"tailagent: the stream from {url} dropped{why}; following task "
        f"{outcome.task_id} again from event {outcome.sequence}"
    )
    wait = FIRST_WAIT
    for _ in range(TRIES):
        try:
            await _follow_from(client, outcome, show)
        except TaskNotFoundError:
            break
        except (A2AClientError, A2AError, httpx.HTTPError) as exc:
            cut = exc
        if not outcome.unfinished:
            return
        await asyncio.sleep(wait)
        wait = min(wait * 2, LONGEST_WAIT)
    await read_the_end(client, outcome, show, url, cut)


async def _follow_from(client: Client, outcome: Outcome, show: Show) -> None:
    """The task's events after the last one seen, each shown once; a snapshot the
    server sends for events it no longer keeps, as the task's status."""
    last = ClientCallContext(service_parameters={"Last-Event-ID": str(outcome.sequence)})
    request = SubscribeToTaskRequest(id=outcome.task_id)
    async for event in client.subscribe(request, context=last):
        if event.HasField("task"):
            show(status_event(event.task))
        elif (number := sequence_of(event)) is None or number > outcome.sequence:
            show(event)


async def read_the_end(
    client: Client, outcome: Outcome, show: Show, url: str, cut: BaseException | None
) -> None:
    """The stream ended before the task did (a server stopping, a connection cut):
    the task's state as the server stored it is the answer."""
    try:
        task = await client.get_task(GetTaskRequest(id=outcome.task_id))
    except (A2AClientError, A2AError, httpx.HTTPError) as exc:
        why = f" ({reason(cut)})" if cut is not None else ""
        complain(
            f"tailagent: the stream from {url} ended before task {outcome.task_id} did{why}, "
            f"and its state cannot be read now: {reason(exc)}"
        )
        return
    show(status_event(task))
