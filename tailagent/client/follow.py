"""Showing a task's events as they come, and its end when the stream stops first:
shared by `call` and `watch`."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
from a2a.client import A2AClientError, Client
from a2a.types.a2a_pb2 import GetTaskRequest, StreamResponse
from a2a.utils.errors import A2AError

from tailagent.client.errors import complain, reason
from tailagent.client.render import Changes, Outcome, Renderer, json_of, status_event

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
