"""A task waiting for a person survives a restart, and the answer reaches the agent.

Each test parks a task on a question, stops the server (a graceful stop or `kill -9`),
starts another on the same state dir and answers there, through the real CLI or A2A,
against the echo agent, the suite's fake ACP agent (with and without `loadSession`)
and the fake Claude Code CLI.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from a2a.utils.errors import UnsupportedOperationError
from google.protobuf.json_format import MessageToDict

from tests.a2a_helpers import A2A, Turn, data_parts, kind_of, state_name, texts, user_message
from tests.conftest import RunningServer, start_server
from tests.test_acp import start_acp
from tests.test_claude import FakeLog, start_claude

RESTARTED = "The server restarted while this task waited; the agent's session was reloaded"


def notices(turn: Turn) -> list[str]:
    return [texts(s.status.message) for s in turn.statuses if kind_of(s) == "notice"]


def restart(server: RunningServer, how: int, tmp: Path, start: Any = None) -> RunningServer:
    """Stops `server` (`how`: SIGTERM, a graceful stop, or SIGKILL, a crash) and starts
    another on its state dir."""
    server.stop(how)
    return (start or (lambda: start_server(tmp, state_dir=server.state_dir)))()


async def still_waiting(a2a: A2A, asked: Turn) -> dict[str, Any]:
    """The task reads as it did before the restart: input-required, the same question."""
    task = await a2a.get(asked.task_id)
    assert state_name(task.status.state) == "input_required", texts(task.status.message)
    assert data_parts(task.status.message)[0] == asked.pending
    assert MessageToDict(task.status.message.metadata)["requestId"] == asked.pending["requestId"]
    listed = {t.id: state_name(t.status.state) for t in await a2a.list()}
    assert listed[asked.task_id] == "input_required"
    return asked.pending


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["stop", "crash"])
async def test_a_permission_waits_across_a_restart_and_is_allowed_after(
    tmp_path: Path, how: int
) -> None:
    server = start_server(tmp_path)
    try:
        asked = await A2A(server.url, server.token).turn("ask")
        server = restart(server, how, tmp_path)
        a2a = A2A(server.url, server.token)
        prompt = await still_waiting(a2a, asked)
        done = await a2a.turn(user_message("yes", task_id=asked.task_id))
        assert done.final_state == "completed", texts(done.last_message)
        assert any(n.startswith(RESTARTED) for n in notices(done))
        resumed = next(s for s in done.statuses if kind_of(s) == "resumed")
        assert texts(resumed.status.message).startswith("allowed by ")
        assert MessageToDict(resumed.metadata)["requestId"] == prompt["requestId"]
        # The echo agent says back what it was told: what it asked and what was decided.
        said = "".join(texts(a.artifact) for a in done.artifacts("response"))
        assert f"You asked for permission to use {prompt['toolName']}" in said
        assert "allowed it: do it now" in said
        audit = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "tailagent", "audit", "--json",
             "--state-dir", str(server.state_dir)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert '"decision": "allow"' in audit.stdout and asked.task_id in audit.stdout
    finally:
        server.stop()


async def test_a_denial_and_a_second_restart_while_still_waiting(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        asked = await A2A(server.url, server.token).turn("ask")
        server = restart(server, signal.SIGTERM, tmp_path)
        await still_waiting(A2A(server.url, server.token), asked)
        server = restart(server, signal.SIGKILL, tmp_path)  # still nobody answered
        a2a = A2A(server.url, server.token)
        await still_waiting(a2a, asked)
        # An answer naming another request is refused and the question stands.
        wrong = await a2a.turn(
            user_message("yes", task_id=asked.task_id, metadata={"requestId": "nope"})
        )
        assert wrong.final_state == "input_required"
        done = await a2a.turn(user_message("no, not on a Friday", task_id=asked.task_id))
        assert done.final_state == "completed", texts(done.last_message)
        said = "".join(texts(a.artifact) for a in done.artifacts("response"))
        assert 'denied it. Their words: "no, not on a Friday"' in said
        with pytest.raises(UnsupportedOperationError, match="has already completed"):
            await a2a.turn(user_message("yes", task_id=asked.task_id))  # answered once
    finally:
        server.stop()


async def test_a_question_waits_across_a_crash_and_its_answer_goes_on(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        asked = await A2A(server.url, server.token).turn("question")
        server = restart(server, signal.SIGKILL, tmp_path)
        a2a = A2A(server.url, server.token)
        prompt = await still_waiting(a2a, asked)
        label = prompt["questions"][0]["options"][0]["label"]
        subscribed = asyncio.create_task(a2a.subscribe(asked.task_id))
        await asyncio.sleep(0.5)
        done = await a2a.turn(user_message(label, task_id=asked.task_id))
        assert done.final_state == "completed", texts(done.last_message)
        said = "".join(texts(a.artifact) for a in done.artifacts("response"))
        assert f'answered: "{prompt["questions"][0]["question"]}": {label}' in said
        events = await asyncio.wait_for(subscribed, 10)  # resubscribed before the answer
        assert state_name(events[-1].status_update.status.state) == "completed"
    finally:
        server.stop()


async def test_an_acp_agent_reloads_its_session_to_take_the_answer(tmp_path: Path) -> None:
    server = start_acp(tmp_path)
    try:
        asked = await A2A(server.url, server.token).turn("ask")
        server = restart(server, signal.SIGKILL, tmp_path, lambda: start_acp(tmp_path))
        a2a = A2A(server.url, server.token)
        await still_waiting(a2a, asked)
        done = await a2a.turn(user_message("yes", task_id=asked.task_id))
        assert done.final_state == "completed", texts(done.last_message)
        assert any(n.startswith(RESTARTED) for n in notices(done))
        session = MessageToDict(done.statuses[-1].metadata)["agentSessionId"]
        first = await a2a.get(asked.task_id)
        assert session and session in str(MessageToDict(first))
    finally:
        server.stop()


async def test_an_agent_that_cannot_reload_fails_the_task_saying_so(tmp_path: Path) -> None:
    flags = ("--no-load", "--no-resume")  # it offers neither way back
    server = start_acp(tmp_path, *flags)
    try:
        asked = await A2A(server.url, server.token).turn("ask")
        server = restart(server, signal.SIGTERM, tmp_path, lambda: start_acp(tmp_path, *flags))
        a2a = A2A(server.url, server.token)
        await still_waiting(a2a, asked)
        done = await a2a.turn(user_message("yes", task_id=asked.task_id))
        assert done.final_state == "failed"
        assert "could not be reloaded to take it" in texts(done.last_message)
        assert "cannot load its earlier session" in texts(done.last_message)
        assert state_name((await a2a.get(asked.task_id)).status.state) == "failed"
    finally:
        server.stop()


async def test_claude_code_resumes_its_session_to_take_the_answer(tmp_path: Path) -> None:
    log = FakeLog(tmp_path / "fake.log")
    env = {**os.environ, "FAKE_CLAUDE_LOG": str(log.path)}
    server = start_claude(tmp_path, env=env)
    try:
        asked = await A2A(server.url, server.token).turn("bash")
        server = restart(
            server, signal.SIGKILL, tmp_path,
            lambda: start_claude(tmp_path, env=env, state_dir=server.state_dir),
        )  # fmt: skip
        a2a = A2A(server.url, server.token)
        await still_waiting(a2a, asked)
        done = await a2a.turn(user_message("yes", task_id=asked.task_id))
        assert done.final_state == "completed", [texts(s.status.message) for s in done.statuses]
        session = MessageToDict(done.statuses[-1].metadata)["agentSessionId"]
        assert any(f"--resume={session}" in argv for argv in log.argvs()[1:])
        told = [str(e["user"]) for e in log.entries() if "user" in e]
        assert any("You asked for permission to use Bash" in t and "allowed it" in t for t in told)
    finally:
        server.stop()
