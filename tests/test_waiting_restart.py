"""A task waiting for a person survives a restart, and the answer reaches the agent.

Each test parks a task on a question, stops the server (a graceful stop or `kill -9`),
starts another on the same state dir and answers there through A2A, against the echo
agent, the suite's fake ACP agent (with and without `loadSession`) and the fake Claude
Code CLI.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from a2a.utils.errors import UnsupportedOperationError
from google.protobuf.json_format import MessageToDict

from tailagent.store.audit import AuditLog
from tailagent.store.database import open_database
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


async def audit_rows(server: RunningServer) -> list[dict[str, Any]]:
    """Every audit row of the server's SQLite store, as `tailagent audit --json` prints
    them: read by the CLI's own reader in this process, where the CLI is not what a test
    tests (a CLI run saved)."""
    database = open_database(f"sqlite+aiosqlite:///{server.state_dir / 'tailagent.db'}")
    try:
        return [asdict(entry) for entry in await AuditLog(database).read()]
    finally:
        await database.aclose()


async def still_waiting(a2a: A2A, asked: Turn) -> dict[str, Any]:
    """The task reads as it did before the restart: input-required, the same question."""
    task = await a2a.get(asked.task_id)
    assert state_name(task.status.state) == "input_required", texts(task.status.message)
    assert data_parts(task.status.message)[0] == asked.pending
    assert MessageToDict(task.status.message.metadata)["requestId"] == asked.pending["requestId"]
    listed = {t.id: state_name(t.status.state) for t in await a2a.list()}
    assert listed[asked.task_id] == "input_required"
    return asked.pending


@pytest.fixture(scope="module")
async def after_a_crash(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[RunningServer, dict[str, Turn]]]:
    """A server killed (`kill -9`) while a permission ("ask") and a question waited, and
    the one started again on its state dir: shared by the tests that each answer one of
    the two (one start and one crash for both, each test its own task)."""
    tmp = tmp_path_factory.mktemp("crash")
    server = start_server(tmp)
    try:
        admin = A2A(server.url, server.token)
        asked = {text: await admin.turn(text) for text in ("ask", "question")}
        server = restart(server, signal.SIGKILL, tmp)
        yield server, asked
    finally:
        server.stop()


async def restarted(
    how: int, tmp: Path, crashed: tuple[RunningServer, dict[str, Turn]]
) -> tuple[RunningServer, Turn]:
    """A server that restarted (`how`) while a permission waited, and that task: after a
    crash the module's (`crashed`), after a graceful stop one of this test's own."""
    if how == signal.SIGKILL:
        return crashed[0], crashed[1]["ask"]
    server = start_server(tmp)
    try:
        ask = await A2A(server.url, server.token).turn("ask")
    except BaseException:
        server.stop()
        raise
    return restart(server, how, tmp), ask


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["stop", "crash"])
async def test_a_permission_waits_across_a_restart_and_is_allowed_after(
    tmp_path: Path, how: int, after_a_crash: tuple[RunningServer, dict[str, Turn]]
) -> None:
    server, asked = await restarted(how, tmp_path, after_a_crash)
    try:
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
        audit = [row for row in await audit_rows(server) if row["task_id"] == asked.task_id]
        assert [row["decision"] for row in audit] == ["allow"], audit
    finally:
        if how == signal.SIGTERM:  # the module's server stops with the module
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


async def test_a_question_waits_across_a_crash_and_its_answer_goes_on(
    after_a_crash: tuple[RunningServer, dict[str, Turn]],
) -> None:
    server, parked = after_a_crash
    asked = parked["question"]
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
