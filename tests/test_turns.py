"""agent.max_concurrent_turns: sends past the limit wait their turn, in order,
and none is refused; a stream that waits is shown its task, submitted, at once."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from a2a.types.a2a_pb2 import SendMessageRequest

from bench.bench_core import rpc
from tests.a2a_helpers import A2A, state_name, texts, user_message
from tests.conftest import RunningServer, start_server
from tests.test_metrics import samples


def one_place(tmp_path: Path) -> RunningServer:
    config = tmp_path / "tailagent.toml"
    config.write_text("[agent]\nmax_concurrent_turns = 1\n")
    return start_server(tmp_path, "--config", str(config))


async def test_a_send_past_the_limit_waits_for_a_place_then_runs(tmp_path: Path) -> None:
    server = one_place(tmp_path)
    try:
        agent = A2A(server.url, server.token)
        slow = asyncio.create_task(agent.turn("slow 2"))
        await asyncio.sleep(0.5)  # the slow turn holds the one place
        quick = asyncio.create_task(agent.turn("hello"))
        async with agent.http() as http:
            for _ in range(40):
                scraped = samples((await http.get(server.url + "/metrics")).text)
                if scraped[("tailagent_turns_waiting", ())] == 1:
                    break
                await asyncio.sleep(0.05)
        assert scraped[("tailagent_turns_waiting", ())] == 1
        assert not quick.done()
        slow_turn = await slow
        slow_ended = time.monotonic()
        quick_turn = await quick
        assert time.monotonic() - slow_ended < 2  # it ran as soon as the place was free
        assert (slow_turn.final_state, quick_turn.final_state) == ("completed", "completed")
        async with agent.http() as http:
            scraped = samples((await http.get(server.url + "/metrics")).text)
        assert scraped[("tailagent_turns_waiting", ())] == 0
    finally:
        assert server.stop() == 0, server.log()


async def test_a_stream_past_the_limit_is_shown_its_task_while_it_waits(tmp_path: Path) -> None:
    server = one_place(tmp_path)
    try:
        agent = A2A(server.url, server.token)
        slow = asyncio.create_task(agent.turn("slow 3"))
        await asyncio.sleep(0.5)  # the slow turn holds the one place
        async with agent.client() as client:
            stream = client.send_message(SendMessageRequest(message=user_message("hello")))
            first = (await asyncio.wait_for(anext(stream), 2)).task
            assert not slow.done(), "the first event came only once the place was free"
            assert state_name(first.status.state) == "submitted"
            stored = await agent.get(first.id)  # stored: a restart would not lose it
            assert state_name(stored.status.state) == "submitted"
            rest = [event async for event in stream]
        assert state_name(rest[-1].status_update.status.state) == "completed"
        done = await agent.get(first.id)
        assert [texts(m) for m in done.history if m.role == 1] == ["hello"]  # once
        assert texts(done.artifacts[-1]) == "echo: hello"
        assert (await slow).final_state == "completed"
    finally:
        assert server.stop() == 0, server.log()


async def test_a_waiting_task_can_be_canceled_and_still_runs_once_its_caller_left(
    tmp_path: Path,
) -> None:
    server = one_place(tmp_path)
    try:
        agent = A2A(server.url, server.token)
        slow = asyncio.create_task(agent.turn("slow 3"))
        await asyncio.sleep(0.5)
        async with agent.client() as client:
            canceled = client.send_message(SendMessageRequest(message=user_message("one")))
            waiting = (await anext(canceled)).task
            await agent.cancel(waiting.id)
            ends = [event async for event in canceled]
        assert state_name(ends[-1].task.status.state) == "canceled"
        request = rpc("SendStreamingMessage", "two")
        headers = {"A2A-Version": "1.0"}
        async with (
            agent.http() as http,
            http.stream("POST", server.url, json=request, headers=headers) as sent,
        ):
            async for line in sent.aiter_lines():  # its first event, then the caller goes
                if line.startswith("data:"):
                    gone = json.loads(line.removeprefix("data:"))["result"]["task"]
                    break
        await slow
        for _ in range(50):
            task = await agent.get(gone["id"])
            if state_name(task.status.state) != "submitted":
                break
            await asyncio.sleep(0.1)
        assert state_name(task.status.state) == "completed"  # as any task whose caller left
        assert texts(task.artifacts[-1]) == "echo: two"
        assert (await agent.get(waiting.id)).status.state == ends[-1].task.status.state
    finally:
        assert server.stop() == 0, server.log()
