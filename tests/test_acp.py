"""ACP agents through a real server: tests/fake_acp_agent.py speaks real ACP over stdio."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from a2a.types.a2a_pb2 import SendMessageRequest
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict

from tests.a2a_helpers import A2A, data_parts, kind_of, state_name, texts, user_message
from tests.conftest import RunningServer, start_server
from tests.processes import ancestors, children, token_alive, token_pid
from tests.test_tokens_and_owners import add_token
from tests.warm_start import cli_run

FAKE = Path(__file__).with_name("fake_acp_agent.py")
TURN = re.compile(r"turn (\d+) of session (\w+) in process (\d+\.\d+)")


def agent_command(*flags: str) -> str:
    return " ".join([sys.executable, str(FAKE), *flags])


def start_acp(
    tmp: Path,
    *flags: str,
    config: str = "",
    env: dict[str, str] | None = None,
    state_dir: Path | None = None,
) -> RunningServer:
    config_path = tmp / "tailagent.toml"
    config_path.write_text(config)
    return start_server(
        tmp,
        "--agent-command",
        agent_command(*flags),
        "--config",
        str(config_path),
        env=env,
        state_dir=state_dir,
    )


def answer_text(turn) -> str:  # type: ignore[no-untyped-def]
    return "".join(texts(a.artifact) for a in turn.artifacts("response"))


def turn_info(turn) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """The turn's number, its session and its process (tests/processes.py process_token)."""
    match = TURN.search(answer_text(turn))
    assert match, answer_text(turn)
    return int(match.group(1)), match.group(2), match.group(3)


@pytest.fixture(scope="module")
def acp_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("acp")
    server = start_acp(
        tmp,
        config="[agent]\ncancel_timeout = 1\n",
        env={**os.environ, "SERVER_SECRET": "do-not-leak"},
    )
    yield server
    assert server.stop() == 0


@pytest.fixture
def agent(acp_server: RunningServer) -> A2A:
    return A2A(acp_server.url, acp_server.token)


def workspace(server: RunningServer) -> Path:
    return server.state_dir.parent / "workspace"


# --- the mapping of ACP updates ----------------------------------------------------------------


async def test_updates_map_to_the_event_vocabulary(agent: A2A) -> None:
    turn = await agent.turn("think plan tool edit fail")
    assert turn.final_state == "completed"
    assert texts(turn.artifacts("thinking")[0].artifact).startswith("considering:")
    plan = data_parts(turn.artifacts("plan")[-1].artifact)[0]["entries"]
    assert [e["status"] for e in plan] == ["completed", "in_progress", "pending"]
    results = [s for s in turn.statuses if kind_of(s) == "tool_result"]
    assert [s.status.message.metadata["status"] for s in results] == [
        "completed",
        "completed",
        "failed",
    ]
    (diff,) = turn.artifacts("diff:calc.py")
    assert diff.artifact.parts[0].media_type == "text/x-diff"
    assert "-a\n+b" in diff.artifact.parts[0].text
    assert turn_info(turn)[0] == 1


async def test_mode_and_commands_are_kept_in_task_metadata(agent: A2A) -> None:
    turn = await agent.turn("hello")
    task = await agent.get(turn.task_id)
    metadata = MessageToDict(task.metadata)
    assert metadata["currentMode"] == "default"
    assert metadata["availableCommands"] == ["review", "test"]


async def test_permission_options_are_the_agents(agent: A2A) -> None:
    asked = await agent.turn("ask")
    options = [o["optionId"] for o in asked.pending["options"]]
    assert options == ["allow_once", "allow_always", "reject_once", "reject_always"]
    done = await agent.turn(user_message("option:allow_always", task_id=asked.task_id))
    assert "permission: allow_always" in answer_text(done)
    asked = await agent.turn("ask")
    done = await agent.turn(user_message("no, not now", task_id=asked.task_id))
    assert "permission: reject_once" in answer_text(done)


# --- terminals, files, environment ---------------------------------------------------------------


async def test_every_terminal_is_a_permission_prompt(agent: A2A, acp_server: RunningServer) -> None:
    asked = await agent.turn("shell")
    prompt = asked.pending
    assert prompt["toolName"] == "terminal"
    assert prompt["input"]["command"].startswith(sys.executable)
    assert prompt["input"]["cwd"] == str(workspace(acp_server).resolve())
    assert prompt["input"]["env"] == {"FAKE_AGENT_VAR": "1"}
    done = await agent.turn(user_message("yes", task_id=asked.task_id))
    assert "shell said from the terminal" in answer_text(done)

    asked = await agent.turn("shell")
    refused = await agent.turn(user_message("no, not on my machine", task_id=asked.task_id))
    assert "terminal refused: The caller refused to run" in answer_text(refused)


async def test_files_stay_inside_the_workspace(agent: A2A, acp_server: RunningServer) -> None:
    root = workspace(acp_server)
    (root / "inside.txt").write_text("hello from inside")
    (root / "escape").unlink(missing_ok=True)
    (root / "escape").symlink_to("/etc")
    turn = await agent.turn(
        "read:inside.txt read:/etc/hostname read:escape/hostname write:sub/new.txt write:../out.txt"
    )
    answer = answer_text(turn)
    assert "read: hello from inside" in answer
    assert answer.count("read refused") == 2
    assert "wrote sub/new.txt" in answer
    assert (root / "sub" / "new.txt").read_text() == "written by fake\n"
    assert "write refused" in answer
    assert not (root.parent / "out.txt").exists()


async def test_the_agent_gets_an_allowlisted_environment(agent: A2A) -> None:
    names = set(re.search(r"env: (.*)", answer_text(await agent.turn("env"))).group(1).split(","))  # type: ignore[union-attr]
    assert "PATH" in names and "HOME" in names
    assert "SERVER_SECRET" not in names
    assert not {n for n in names if n.startswith("TAILAGENT_")}


async def test_stderr_is_drained_so_a_chatty_agent_never_stalls(agent: A2A) -> None:
    turn = await agent.turn("noise 8000 done")
    assert turn.final_state == "completed"


async def test_a_fast_agents_chunks_all_arrive_in_order(agent: A2A) -> None:
    """Chunks queued faster than they are published are joined, never lost or reordered."""
    turn = await agent.turn("chunks 1500")
    assert turn.final_state == "completed"
    answer = answer_text(turn)
    assert answer.startswith("".join(f"chunk {i} " for i in range(1, 1501)) + "turn ")
    task = await agent.get(turn.task_id)
    stored = "".join(texts(a) for a in task.artifacts if a.artifact_id == "response")
    assert stored == answer


# --- processes and sessions ------------------------------------------------------------------


async def test_a_context_keeps_its_process_across_turns(agent: A2A) -> None:
    first = await agent.turn("one")
    second = await agent.turn(user_message("two", context_id=first.context_id))
    other = await agent.turn("elsewhere")
    n1, session1, pid1 = turn_info(first)
    n2, session2, pid2 = turn_info(second)
    assert (session2, pid2, n2) == (session1, pid1, n1 + 1)
    assert turn_info(other)[2] != pid1


async def test_a_crash_fails_the_turn_with_the_reason_and_the_next_turn_gets_a_new_process(
    agent: A2A,
) -> None:
    before = await agent.turn("hello")
    pid = turn_info(before)[2]
    crashed = await agent.turn(user_message("crash", context_id=before.context_id))
    assert crashed.final_state == "failed"
    reason = texts(crashed.last_message)
    assert "died during the turn" in reason and "fatal: fake agent crashed on purpose" in reason
    after = await agent.turn(user_message("again", context_id=before.context_id))
    assert after.final_state == "completed"
    assert turn_info(after)[2] != pid
    assert turn_info(after)[1] == turn_info(before)[1]  # session/load kept the session


async def test_cancel_stops_the_turn_and_keeps_the_process(agent: A2A) -> None:
    async with agent.client() as client:
        stream = client.send_message(SendMessageRequest(message=user_message("slow 30")))
        first = await anext(stream)
        await anext(stream)
        canceled = await agent.cancel(first.task.id)
        assert state_name(canceled.status.state) == "canceled"
        await asyncio.wait_for(stream.aclose(), 5)
    after = await agent.turn(user_message("after", context_id=first.task.context_id))
    assert after.final_state == "completed"


async def test_an_agent_deaf_to_cancel_is_killed_after_the_bound(agent: A2A) -> None:
    before = await agent.turn("hello")
    pid = turn_info(before)[2]
    async with agent.client() as client:
        stream = client.send_message(
            SendMessageRequest(message=user_message("hang", context_id=before.context_id))
        )
        first = await anext(stream)
        await anext(stream)
        started = time.monotonic()
        canceled = await agent.cancel(first.task.id)
        assert state_name(canceled.status.state) == "canceled"
        assert time.monotonic() - started < 10
        await asyncio.wait_for(stream.aclose(), 5)
    for _ in range(50):
        if not token_alive(pid):
            break
        await asyncio.sleep(0.1)
    assert not token_alive(pid)
    after = await agent.turn(user_message("after", context_id=before.context_id))
    assert after.final_state == "completed" and turn_info(after)[2] != pid


async def test_cancel_of_a_parked_permission_prompt(agent: A2A) -> None:
    asked = await agent.turn("ask")
    canceled = await agent.cancel(asked.task_id)
    assert state_name(canceled.status.state) == "canceled"
    after = await agent.turn(user_message("after", context_id=asked.context_id))
    assert after.final_state == "completed"


# --- configurations of their own -------------------------------------------------------------


async def test_idle_processes_stop_and_the_context_resumes_with_session_load(
    tmp_path: Path,
) -> None:
    server = start_acp(
        tmp_path, "--no-resume", config="[agent]\nidle_timeout = 0.3\nwarm_spares = 0\n"
    )
    try:
        agent = A2A(server.url, server.token)
        first = await agent.turn("hello")
        _, session, pid = turn_info(first)
        for _ in range(50):
            if not token_alive(pid):
                break
            await asyncio.sleep(0.1)
        assert not token_alive(pid)
        again = await agent.turn(user_message("again", context_id=first.context_id))
        notices = [texts(s.status.message) for s in again.statuses if kind_of(s) == "notice"]
        assert "Resumed the agent session of this context (with session/load)." in notices
        assert turn_info(again)[1] == session and turn_info(again)[2] != pid
    finally:
        server.stop()


async def test_without_session_load_a_resumed_context_says_continuity_was_lost(
    tmp_path: Path,
) -> None:
    server = start_acp(tmp_path, "--no-load", "--no-resume", config="[agent]\nidle_timeout = 0.3\n")
    try:
        agent = A2A(server.url, server.token)
        first = await agent.turn("hello")
        pid = turn_info(first)[2]
        for _ in range(50):
            if not token_alive(pid):
                break
            await asyncio.sleep(0.1)
        again = await agent.turn(user_message("again", context_id=first.context_id))
        notices = [texts(s.status.message) for s in again.statuses if kind_of(s) == "notice"]
        assert any("cannot load earlier sessions" in n for n in notices)
        assert turn_info(again)[1] != turn_info(first)[1]
    finally:
        server.stop()


async def test_max_processes_evicts_only_idle_ones(tmp_path: Path) -> None:
    server = start_acp(tmp_path, config="[agent]\nmax_processes = 1\nwarm_spares = 0\n")
    try:
        agent = A2A(server.url, server.token)
        first = await agent.turn("hello")
        second = await agent.turn("other context")  # the idle first one is evicted
        assert second.final_state == "completed"
        assert not token_alive(turn_info(first)[2])
        parked = await agent.turn("ask")
        refused = await agent.turn("a third")
        assert refused.final_state == "failed"
        assert "agent.max_processes" in texts(refused.last_message)
        await agent.cancel(parked.task_id)
    finally:
        server.stop()


async def test_a_warm_spare_is_ready_before_the_first_new_context(tmp_path: Path) -> None:
    server = start_acp(tmp_path, config="[agent]\nwarm_spares = 1\n")
    try:
        agent = A2A(server.url, server.token)
        spare_pids = set(children(server.process.pid))
        assert len(spare_pids) == 1  # started and initialized before the first request
        turn = await agent.turn("hello")
        agent_pid = token_pid(turn_info(turn)[2])
        assert agent_pid is not None and spare_pids & {agent_pid, *ancestors(agent_pid)}
        for _ in range(50):  # and a new spare takes its place
            if len(set(children(server.process.pid))) == 2:
                break
            await asyncio.sleep(0.1)
        assert len(set(children(server.process.pid))) == 2
    finally:
        server.stop()


async def test_an_agent_that_needs_a_login_fails_the_task_saying_what_to_do(tmp_path: Path) -> None:
    server = start_acp(tmp_path, "--auth-required")
    try:
        agent = A2A(server.url, server.token)
        turn = await agent.turn("hello")
        assert turn.final_state == "failed"
        assert "needs a login on the server" in texts(turn.last_message)
    finally:
        server.stop()


async def test_an_agent_that_logs_in_with_its_key_is_logged_in_and_serves(tmp_path: Path) -> None:
    """Like codex-acp 2.x: it lists its login methods whatever its state, and opens a
    session once told to use the key it was given; without the key, the login hint."""
    config = '[agent]\nenv_passthrough = ["FAKE_AGENT_KEY"]\n'
    (tmp_path / "keyed").mkdir()
    (tmp_path / "keyless").mkdir()
    keyed = start_acp(tmp_path / "keyed", "--key-login", "FAKE_AGENT_KEY", config=config,
                      env={**os.environ, "FAKE_AGENT_KEY": "k-123"})  # fmt: skip
    try:
        turn = await A2A(keyed.url, keyed.token).turn("hello")
        assert turn.final_state == "completed", texts(turn.last_message)
        assert "logging in with api-key" in keyed.log()
    finally:
        keyed.stop()
    without = {k: v for k, v in os.environ.items() if k != "FAKE_AGENT_KEY"}
    keyless = start_acp(tmp_path / "keyless", "--key-login", "FAKE_AGENT_KEY", config=config,
                        env=without)  # fmt: skip
    try:
        turn = await A2A(keyless.url, keyless.token).turn("hello")
        assert turn.final_state == "failed"
        assert "needs a login on the server" in texts(turn.last_message)
    finally:
        keyless.stop()


def test_a_command_that_cannot_start_stops_the_server_with_one_line(tmp_path: Path) -> None:
    result = cli_run(
        [
            sys.executable,
            "-m",
            "tailagent",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            str(tmp_path),
            "--agent-command",
            f"{sys.executable} {tmp_path}/missing.py",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()
    assert any(line.startswith("tailagent: the agent") and "did not start" in line for line in last)
    assert "missing.py" in result.stderr


@pytest.mark.parametrize(
    ("sandbox", "program"), [("off", "npx"), ("on", "npm")], ids=["unfenced", "fenced"]
)
def test_a_missing_npx_is_one_clear_line(tmp_path: Path, sandbox: str, program: str) -> None:
    """Unfenced, npx runs the preset; fenced, tailagent installs it with npm."""
    env = {**os.environ, "PATH": str(tmp_path), "TAILAGENT_SANDBOX_MODE": sandbox}
    result = cli_run(
        [
            sys.executable,
            "-m",
            "tailagent",
            "serve",
            "--agent",
            "claude-acp",
            "--listen",
            "127.0.0.1:0",
            "--state-dir",
            str(tmp_path / "state"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"tailagent: cannot start the agent: '{program}' is not on PATH (install Node.js and npm)"
    )


# --- modes and MCP servers -------------------------------------------------------------------


async def test_mcp_servers_and_a_chosen_mode_reach_the_agent(tmp_path: Path) -> None:
    config = (
        '[[mcp_servers]]\nname = "files"\ncommand = "mcp-files"\nargs = ["--root", "."]\n\n'
        '[[mcp_servers]]\nname = "docs"\nurl = "http://127.0.0.1:9/mcp"\n'
    )
    server = start_acp(tmp_path, config=config)
    try:
        admin = A2A(server.url, server.token)
        plain = await admin.turn("setup")
        assert "mode: default; mcp: files,docs" in answer_text(plain)
        planned = await admin.turn(user_message("setup", metadata={"mode": "plan"}))
        assert "mode: plan; mcp: files,docs" in answer_text(planned)
        bypass = await admin.turn(user_message("setup", metadata={"mode": "bypassPermissions"}))
        assert "mode: bypassPermissions" in answer_text(bypass)
        caller = A2A(server.url, add_token(server, "modes-caller", "caller", "approver"))
        with pytest.raises(A2AError, match="only admins may choose it"):
            await caller.send(user_message("setup", metadata={"mode": "bypassPermissions"}))
    finally:
        server.stop()
