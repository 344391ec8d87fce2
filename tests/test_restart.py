"""A restart loses no task, and leaves none `working` forever."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from a2a.types.a2a_pb2 import SendMessageRequest

from tailagent.store.opening import RESTART_MESSAGE, STOP_MESSAGE
from tests.a2a_helpers import A2A, kind_of, state_name, texts, user_message
from tests.conftest import start_server
from tests.test_decisions import send_now


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["crash", "stop"])
async def test_tasks_survive_a_restart_in_a_true_state(tmp_path: Path, how: int) -> None:
    first = start_server(tmp_path)
    try:
        a2a = A2A(first.url, first.token)
        done = await a2a.turn("finished before the restart")
        parked = await a2a.turn("ask")
        async with a2a.client() as client:
            stream = client.send_message(SendMessageRequest(message=user_message("slow 30")))
            working_id = (await anext(stream)).task.id
            await anext(stream)
            assert first.stop(how) == (0 if how == signal.SIGTERM else -signal.SIGKILL)
            # The stream ends: cut off by a crash, or closed by a stop.
            with contextlib.suppress(Exception):
                async for _ in stream:
                    pass
    finally:
        first.stop()

    second = start_server(tmp_path, state_dir=first.state_dir)
    try:
        a2a = A2A(second.url, second.token)
        assert state_name((await a2a.get(done.task_id)).status.state) == "completed"
        task = await a2a.get(working_id)
        assert state_name(task.status.state) == "failed"
        # A crash is found at the next start; a stop says so itself, as it stops.
        expected = RESTART_MESSAGE if how == signal.SIGKILL else STOP_MESSAGE
        assert texts(task.status.message) == expected
        # A task waiting for an answer waits on (tests/test_waiting_restart.py).
        assert state_name((await a2a.get(parked.task_id)).status.state) == "input_required"
        listed = {t.id for t in await a2a.list()}
        assert {done.task_id, parked.task_id, working_id} <= listed

        # The context keeps its agent session across the restart.
        again = await a2a.turn(user_message("after", context_id=done.context_id))
        assert again.final_state == "completed"
        notices = [texts(s.status.message) for s in again.statuses if kind_of(s) == "notice"]
        assert "Resumed the agent session of this context." in notices
        before = done.statuses[-1].metadata["agentSessionId"]
        assert again.statuses[-1].metadata["agentSessionId"] == before
    finally:
        second.stop()


async def test_a_second_server_on_the_same_state_dir_is_refused(tmp_path: Path) -> None:
    """It would take the first one's waiting tasks for a crash's leftovers and fail them."""
    first = start_server(tmp_path)
    try:
        a2a = A2A(first.url, first.token)
        parked = await a2a.turn("ask")
        argv = [sys.executable, "-m", "tailagent", "serve", "--agent", "echo", "--listen",
                "127.0.0.1:0", "--state-dir", str(first.state_dir)]  # fmt: skip
        second = await asyncio.to_thread(
            subprocess.run, argv, capture_output=True, text=True, timeout=30
        )
        assert second.returncode == 1
        line = second.stderr.strip().splitlines()[-1]
        assert f"PID {first.process.pid}, listening on {first.url}" in line, line
        assert "--state-dir" in line
        assert state_name((await a2a.get(parked.task_id)).status.state) == "input_required"
    finally:
        assert first.stop() == 0
    again = start_server(tmp_path, state_dir=first.state_dir)  # the lock went with the process
    again.stop()


async def test_a_stop_ends_what_the_next_start_would_close_and_says_how_many(
    tmp_path: Path,
) -> None:
    """What a run of the A2A TCK leaves: tasks paused with no question tailagent asked
    (its input-required scenario) and a turn working that no request streams. The stop
    ends them and counts them; the next start then finds nothing to close, and only the
    task waiting for a person's answer waits on."""
    first = start_server(tmp_path)
    try:
        a2a = A2A(first.url, first.token)
        paused = []
        for i in range(3):
            sent = await a2a.send(user_message("x", message_id=f"tck-input-required-{i}"))
            assert state_name(sent.task.status.state) == "input_required"
            paused.append(sent.task.id)
        parked = await a2a.turn("ask")
        async with a2a.client(streaming=False) as client:
            working = (await send_now(client, user_message("slow 30"))).id
    finally:
        assert first.stop() == 0
    (said,) = [line for line in first.log().splitlines() if "unfinished task" in line]
    assert said.endswith(
        "stopping: 4 unfinished tasks ended; "
        "1 task waiting for an answer will wait on for the next start"
    ), said

    second = start_server(tmp_path, state_dir=first.state_dir)
    try:
        log = second.log()
        assert "left unfinished by the previous run" not in log
        assert "1 task(s) still wait for an answer, as before the restart" in log
        a2a = A2A(second.url, second.token)
        for task_id in [*paused, working]:
            task = await a2a.get(task_id)
            assert state_name(task.status.state) == "failed", task_id
            assert texts(task.status.message) == STOP_MESSAGE
        assert state_name((await a2a.get(parked.task_id)).status.state) == "input_required"
    finally:
        second.stop()
