"""ACP's methods stable in 2026, spoken by tests/fake_acp_agent.py: session/close when a
session ends, session/resume before session/load, $/cancel_request for a request given
up on, usage_update. Each also against an agent that does not offer it: the old path,
no error."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from a2a.types.a2a_pb2 import Message

from tailagent.agents.acp.backend import AcpBackend
from tailagent.agents.acp.presets import CUSTOM
from tailagent.agents.acp.process import AgentProcess
from tailagent.agents.events import AgentEvent, PromptText, TurnDone, UsageUpdated
from tailagent.config import AgentSettings
from tests.a2a_helpers import A2A, kind_of, state_name, texts, user_message
from tests.conftest import RunningServer
from tests.processes import token_alive
from tests.test_acp import agent_command, answer_text, start_acp, turn_info
from tests.test_call_cli import call, reply_lines, run_reply

IDLE = "[agent]\nidle_timeout = 0.3\nwarm_spares = 0\ncancel_timeout = 1\n"


async def gone(pid: str) -> None:
    for _ in range(100):
        if not token_alive(pid):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"agent process {pid} still runs")


def calls(server: RunningServer, since: int = 0) -> list[str]:
    """The lifecycle calls the fake agents got, in order: they say them on stderr
    (`--log -`), which the server logs; no file outside their sandbox could carry them.
    `since`: from that offset of the log on, so one test of a shared server reads only
    what came after its start."""
    marker = "stderr: lifecycle: "
    lines = server.log()[since:].splitlines()
    return [line.split(marker, 1)[1] for line in lines if marker in line]


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One server of the fake agent as it comes, saying its lifecycle calls (`--log -`),
    for the tests that neither restart it nor configure it: each turn in a context of its
    own, so what one test left cannot pass for another's."""
    server = start_acp(tmp_path_factory.mktemp("stable"), "--log", "-")
    yield server
    assert server.stop() == 0


def notices(turn) -> list[str]:  # type: ignore[no-untyped-def]
    return [texts(s.status.message) for s in turn.statuses if kind_of(s) == "notice"]


async def reaped_and_again(tmp_path: Path, *flags: str) -> tuple[str, list[str], list[str]]:
    """A turn, its idle process reaped, a second turn in the same context: the session
    id of the first, what the agents were asked, and the second turn's notices."""
    server = start_acp(tmp_path, "--log", "-", *flags, config=IDLE)
    try:
        agent = A2A(server.url, server.token)
        first = await agent.turn("hello")
        _, session, pid = turn_info(first)
        await gone(pid)
        again = await agent.turn(user_message("again", context_id=first.context_id))
        assert again.final_state == "completed", answer_text(again)
        return session, calls(server), notices(again)
    finally:
        server.stop()


# --- session/close and session/resume ---------------------------------------------------------


async def test_a_reaped_session_is_closed_and_comes_back_with_session_resume(
    tmp_path: Path,
) -> None:
    session, seen, said = await reaped_and_again(tmp_path)
    assert seen[:3] == [f"new {session}", f"close {session}", f"resume {session}"]
    assert f"load {session}" not in seen
    assert "Resumed the agent session of this context (with session/resume)." in said


async def test_an_agent_without_session_resume_is_loaded(tmp_path: Path) -> None:
    session, seen, said = await reaped_and_again(tmp_path, "--no-resume")
    assert seen[:3] == [f"new {session}", f"close {session}", f"load {session}"]
    assert "Resumed the agent session of this context (with session/load)." in said


async def test_an_agent_without_session_close_is_just_stopped(tmp_path: Path) -> None:
    session, seen, said = await reaped_and_again(tmp_path, "--no-close")
    assert seen[:2] == [f"new {session}", f"resume {session}"]
    assert not any(line.startswith("close") for line in seen)
    assert "Resumed the agent session of this context (with session/resume)." in said


async def test_a_server_stop_closes_the_sessions_it_holds(tmp_path: Path) -> None:
    server = start_acp(tmp_path, "--log", "-")
    try:
        turn = await A2A(server.url, server.token).turn("hello")
        session = turn_info(turn)[1]
    finally:
        assert server.stop() == 0
    assert f"close {session}" in calls(server)


# --- $/cancel_request ---------------------------------------------------------------------------


async def test_a_session_close_left_unanswered_is_cancelled_by_request_id(tmp_path: Path) -> None:
    server = start_acp(tmp_path, "--log", "-", "--slow-close", config=IDLE)
    try:
        first = await A2A(server.url, server.token).turn("hello")
        _, session, pid = turn_info(first)
        await gone(pid)  # cancel_timeout (1 s), then $/cancel_request, then the stop
    finally:
        server.stop()
    seen = calls(server)
    assert seen[1] == f"close {session}"
    assert seen[2].startswith("cancel_request ") and seen[2].split()[1].isdigit()
    assert seen[3] == f"close {session} cancelled"


async def test_a_session_resume_left_unanswered_is_cancelled_and_load_takes_over(
    tmp_path: Path,
) -> None:
    # The unanswered resume is given start_timeout; the agent's own start is too, and a
    # loaded 2-core box took more than 2 s for it.
    config = IDLE + "start_timeout = 6\n"
    server = start_acp(tmp_path, "--log", "-", "--slow-resume", config=config)
    try:
        agent = A2A(server.url, server.token)
        first = await agent.turn("hello")
        _, session, pid = turn_info(first)
        await gone(pid)
        again = await agent.turn(user_message("again", context_id=first.context_id))
        assert again.final_state == "completed", answer_text(again)
        assert turn_info(again)[1] == session
        said = notices(again)
    finally:
        server.stop()
    seen = calls(server)
    at = seen.index(f"resume {session}")
    assert seen[at + 1].startswith("cancel_request ")
    assert seen[at + 2 : at + 4] == [f"resume {session} cancelled", f"load {session}"]
    assert "Resumed the agent session of this context (with session/load)." in said


# --- usage_update ------------------------------------------------------------------------------


async def turn_events(tmp_path: Path, prompt: str, *flags: str) -> list[AgentEvent]:
    settings = AgentSettings(warm_spares=0, cancel_timeout=1)
    backend = AcpBackend(CUSTOM, tmp_path, settings, agent_command(*flags))
    session = await backend.open_session()
    try:
        return [event async for event in session.prompt([PromptText(prompt)])]
    finally:
        await session.close()
        await backend.aclose()


async def test_usage_update_becomes_an_event_with_the_cost_in_dollars(tmp_path: Path) -> None:
    events = await turn_events(tmp_path, "usage:0.25 usage:0.5:EUR usage")
    usage = [e for e in events if isinstance(e, UsageUpdated)]
    assert usage == [
        UsageUpdated(used=1000, size=200000, cost_usd=0.25),
        UsageUpdated(used=1000, size=200000, cost_usd=None),  # not converted from EUR
        UsageUpdated(used=1000, size=200000, cost_usd=None),
    ]
    assert isinstance(events[-1], TurnDone)


async def test_a_turn_with_usage_completes_through_the_server(logged: RunningServer) -> None:
    turn = await A2A(logged.url, logged.token).turn("usage:0.25")
    assert turn.final_state == "completed", texts(turn.last_message)
    assert turn_info(turn)[0] == 1


# --- session config options: the model ---------------------------------------------------------


async def test_a_turns_model_sets_the_agents_model_config_option(logged: RunningServer) -> None:
    agent = A2A(logged.url, logged.token)
    first = await agent.turn("model")
    assert "model: fast" in answer_text(first)
    smart = await agent.turn(
        user_message("model", context_id=first.context_id, metadata={"model": "smart"})
    )
    assert "model: smart" in answer_text(smart)
    by_name = await agent.turn(user_message("model", metadata={"model": "Smart model"}))
    assert "model: smart" in answer_text(by_name)
    unknown = await agent.turn(user_message("model", metadata={"model": "huge"}))
    assert unknown.final_state == "failed"
    said = texts(unknown.last_message)
    assert said == "The agent has no model 'huge'; it offers: fast, smart."


async def test_an_agent_without_config_options_keeps_its_model_and_says_so(
    tmp_path: Path,
) -> None:
    server = start_acp(tmp_path, "--no-config-options")
    try:
        turn = await A2A(server.url, server.token).turn(
            user_message("model", metadata={"model": "smart"})
        )
        assert turn.final_state == "completed"
        assert "model: fast" in answer_text(turn)
        expected = "The agent offers no choice of model: it keeps its own, not 'smart'."
        assert expected in notices(turn)
    finally:
        server.stop()


# --- elicitation ---------------------------------------------------------------------------------


def test_an_elicitation_is_a_question_per_field_answered_from_the_cli(
    logged: RunningServer,
) -> None:
    asked = call(logged, "elicit")
    assert asked.returncode == 3, asked.stdout + asked.stderr
    assert "! Where should the build go?\n[input-required] Branch\nCount\nColour\nPush\n" in (
        asked.stdout
    )
    assert "  Colour: red, blue\n  Push: yes, no\n" in asked.stdout
    (reply,) = reply_lines(asked.stdout)
    assert "--answer Branch=ANSWER" in reply

    def answering(line: str, count: str) -> str:
        answers = f"--answer Branch=main --answer Count={count} --answer Colour=blue"
        return line.replace("--answer Branch=ANSWER", answers + " --answer Push=yes")

    wrong = run_reply(logged, answering(reply, "three"))
    assert wrong.returncode == 3, wrong.stdout + wrong.stderr
    said = "That answer does not fit the agent's form (count: 'three' is not a number)."
    assert said in wrong.stdout
    (again,) = reply_lines(wrong.stdout)
    answered = run_reply(logged, answering(again, "3"))
    assert answered.returncode == 0, answered.stdout + answered.stderr
    content = '{"branch": "main", "colour": "b", "count": 3, "push": true}'
    assert f"elicited: accept {content}" in answered.stdout


async def test_a_canceled_elicitation_is_answered_cancel_and_the_session_goes_on(
    logged: RunningServer,
) -> None:
    since = len(logged.log())
    agent = A2A(logged.url, logged.token)
    asked = await agent.turn("elicit")
    assert asked.final_state == "input_required"
    assert [q["header"] for q in asked.pending["questions"]] == [
        "Branch", "Count", "Colour", "Push",
    ]  # fmt: skip
    canceled = await agent.cancel(asked.task_id)
    assert state_name(canceled.status.state) == "canceled"
    after = await agent.turn(user_message("after", context_id=asked.context_id))
    assert after.final_state == "completed"
    assert turn_info(after)[0] == 2
    assert "elicitation answered cancel" in calls(logged, since)


async def test_an_answer_that_is_none_of_a_fields_choices_is_asked_again(
    logged: RunningServer,
) -> None:
    agent = A2A(logged.url, logged.token)
    asked = await agent.turn("elicit")
    colour = next(q for q in asked.pending["questions"] if q["header"] == "Colour")
    assert [o["label"] for o in colour["options"]] == ["red", "blue"]

    def answering(choice: str) -> Message:
        answers = {"Branch": "main", "Colour": choice}
        return user_message(task_id=asked.task_id, data={"answers": answers})

    hostile = "green; rm -rf /"
    wrong = await agent.turn(answering(hostile))
    assert wrong.final_state == "input_required"
    said = f"colour: {hostile!r} is not one of red, blue"
    assert f"That answer does not fit the agent's form ({said})." in notices(wrong)
    assert "elicited" not in answer_text(wrong)  # the agent got no answer at all
    assert [q["header"] for q in wrong.pending["questions"]] == [
        "Branch", "Count", "Colour", "Push",
    ]  # fmt: skip
    # A choice's label, in any case, is one of them: the agent gets its value.
    answered = await agent.turn(answering("BLUE"))
    assert answered.final_state == "completed"
    assert 'elicited: accept {"branch": "main", "colour": "b"}' in answer_text(answered)


async def test_a_start_cancelled_mid_handshake_leaves_nothing_running(tmp_path: Path) -> None:
    """A server stopping while a spare agent is still starting cancels that start (the
    spares' aclose). The agent, which never answers `initialize` here, and the
    connection's tasks go with it: once they were left behind, and the loop closed on
    acp's sender task pending ("Task was destroyed but it is pending!")."""
    silent = [sys.executable, "-c", "import time; time.sleep(60)"]
    agent = AgentProcess(silent, dict(os.environ), tmp_path, host=lambda _: object())
    start = asyncio.create_task(agent.start(handshake_timeout=30))
    for _ in range(100):  # until the handshake is under way
        if agent.connection is not None:
            break
        await asyncio.sleep(0.05)
    start.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start
    assert not agent.alive
    left = [
        task
        for task in asyncio.all_tasks()
        if task is not asyncio.current_task() and not task.done() and "acp" in repr(task)
    ]
    assert left == []


async def test_a_spare_cancelled_while_it_freezes_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spare's handshake done, it is frozen until a conversation takes it; a server
    stopping in that moment (a cgroup freeze takes a few ms) cancelled the start after
    the process had started and before anyone held it: the agent ran on, and acp's sender
    task was dropped pending ("Task was destroyed but it is pending!", seen in a run of
    test_cost_bounds). The freeze is held open here so the cancel lands in it."""
    freezing: list[AgentProcess] = []

    async def slow_freeze(process: AgentProcess) -> None:
        freezing.append(process)
        await asyncio.Event().wait()

    monkeypatch.setattr(AgentProcess, "freeze", slow_freeze)
    backend = AcpBackend(CUSTOM, tmp_path, AgentSettings(), agent_command())
    start = asyncio.create_task(backend.start())
    for _ in range(200):
        if freezing:
            break
        await asyncio.sleep(0.05)
    assert freezing, "the first agent never reached its freeze"
    assert freezing[0].alive
    start.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start
    assert not freezing[0].alive
    left = [
        task
        for task in asyncio.all_tasks()
        if task is not asyncio.current_task() and not task.done() and "acp" in repr(task)
    ]
    assert left == []
