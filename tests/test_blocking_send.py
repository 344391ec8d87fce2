"""A blocking SendMessage of a new task, as its caller sees it: the answer is the
stored task; a cancel while it runs ends it canceled, and nothing comes after; a
prompt waits for its answer; a caller who leaves does not stop it. (Such a task is
shown to nobody before it is final or waiting, so it is written once: these are
the cases where that must not change what anyone sees.)"""

from __future__ import annotations

import asyncio
import time

import httpx
from a2a.types.a2a_pb2 import Task

from bench.bench_core import rpc
from tailagent.store.tasks import SERVER_ID_KEY, SERVER_URL_KEY
from tests.a2a_helpers import A2A, state_name, texts, user_message
from tests.conftest import RunningServer

SETTLE = 20.0


async def appears(agent: A2A, text: str) -> Task:
    """The task a blocking send of `text` started, once a listing shows it."""
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline:
        for task in await agent.list():
            if task.history and texts(task.history[0]) == text:
                return task
        await asyncio.sleep(0.1)
    raise AssertionError(f"no task for {text!r} appeared")


async def settled(agent: A2A, task_id: str, state: str) -> Task:
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline:
        task = await agent.get(task_id)
        if state_name(task.status.state) == state:
            return task
        await asyncio.sleep(0.1)
    raise AssertionError(f"task {task_id} never reached {state}: {task.status}")


async def test_the_answer_is_the_stored_task(server: RunningServer) -> None:
    agent = A2A(server.url, server.token)
    sent = (await agent.send(user_message("think plan quick one"))).task
    assert state_name(sent.status.state) == "completed"
    assert texts(sent.artifacts[-1]).startswith("echo: think plan quick one")
    assert [texts(m) for m in sent.history if m.role == 1] == ["think plan quick one"]
    stored = await agent.get(sent.id)
    for key in (SERVER_ID_KEY, SERVER_URL_KEY):  # which server runs it: the store's own
        del stored.metadata[key]
    assert stored == sent


def test_an_answer_shaped_by_its_request_is_rendered_as_asked(server: RunningServer) -> None:
    """The answer reuses the rendering the store made for the task's row only while
    it is the same task: a request for no history gets none, though the row has it."""
    body = rpc("SendMessage", "think quick no history")
    body["params"]["configuration"] = {"historyLength": 0}  # type: ignore[index]
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {server.token}"}
    answered = httpx.post(server.url, json=body, headers=headers, timeout=30).json()
    task = answered["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert "history" not in task, task
    asked = {"id": task["id"]}
    stored = httpx.post(server.url, json=rpc("GetTask", "") | {"params": asked},
                        headers=headers, timeout=30).json()["result"]  # fmt: skip
    assert [m["role"] for m in stored["history"]] == ["ROLE_USER", "ROLE_AGENT"]


async def test_it_can_be_canceled_while_it_runs(server: RunningServer) -> None:
    agent = A2A(server.url, server.token)
    blocking = asyncio.create_task(agent.send(user_message("slow 30 quick cancel")))
    running = await appears(agent, "slow 30 quick cancel")
    assert state_name(running.status.state) == "working"
    canceled = await agent.cancel(running.id)
    assert state_name(canceled.status.state) == "canceled"
    answered = (await asyncio.wait_for(blocking, 10)).task
    assert (answered.id, state_name(answered.status.state)) == (running.id, "canceled")
    await asyncio.sleep(1.5)  # a tick of the canceled turn would have come by now
    assert state_name((await agent.get(running.id)).status.state) == "canceled"


async def test_a_prompt_waits_for_its_answer(server: RunningServer) -> None:
    agent = A2A(server.url, server.token)
    asked = (await agent.send(user_message("ask:quick"))).task
    assert state_name(asked.status.state) == "input_required"
    answer = user_message("yes", task_id=asked.id, context_id=asked.context_id)
    done = (await agent.send(answer)).task
    assert state_name(done.status.state) == "completed"


async def test_a_caller_who_leaves_does_not_stop_it(server: RunningServer) -> None:
    agent = A2A(server.url, server.token)
    headers = {"A2A-Version": "1.0"}
    async with agent.http(timeout=0.5) as http:
        try:
            await http.post(
                server.url, json=rpc("SendMessage", "slow 2 quick leave"), headers=headers
            )
        except httpx.TimeoutException:
            pass
        else:
            raise AssertionError("the send answered before the caller left")
    left = await appears(agent, "slow 2 quick leave")
    done = await settled(agent, left.id, "completed")
    assert texts(done.artifacts[-1]).endswith("echo: slow 2 quick leave")


async def test_only_a_turn_someone_may_stream_closes_its_answer(server: RunningServer) -> None:
    """The close of the answer's stream, an empty last chunk, changes nothing in a task:
    a blocking send's first turn, which nobody can stream, leaves that event out and
    holds the same answer as a streamed send; its next turn, which may be streamed,
    closes its answer again."""
    agent = A2A(server.url, server.token)
    streamed = await agent.turn("same words")
    assert [c.last_chunk for c in streamed.artifacts("response")][-1] is True
    streamed_task = await agent.get(streamed.task_id)
    sent = (await agent.send(user_message("same words"))).task
    assert list(sent.artifacts) == list(streamed_task.artifacts)
    numbered = streamed_task.metadata["sequence"]
    assert numbered == len(streamed.events) - 1  # the first response is the task itself
    assert sent.metadata["sequence"] == numbered - 1

    asked = (await agent.send(user_message("ask:quick"))).task
    assert state_name(asked.status.state) == "input_required"
    answered = await agent.turn(user_message("yes", task_id=asked.id, context_id=asked.context_id))
    assert answered.final_state == "completed"
    assert [c.last_chunk for c in answered.artifacts("response")][-1] is True
