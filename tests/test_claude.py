"""`--agent claude` through a real server, with tests/fake_claude_cli.py as the Claude
Code CLI: the real claude-agent-sdk drives it over its stream-json control protocol."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2a.types.a2a_pb2 import SendMessageRequest
from google.protobuf.json_format import MessageToDict

from tests.a2a_helpers import A2A, data_parts, kind_of, state_name, texts, user_message
from tests.conftest import RunningServer, start_server
from tests.test_agent_logins import START_LINE

FAKE_CLI = Path(__file__).with_name("fake_claude_cli.py")


def start_claude(
    tmp: Path, config: str = "", env: dict[str, str] | None = None, state_dir: Path | None = None
) -> RunningServer:
    path = tmp / "tailagent.toml"
    path.write_text(f'[claude]\ncli_path = "{FAKE_CLI}"\n{config}')
    return start_server(
        tmp, "--agent", "claude", "--config", str(path), env=env, state_dir=state_dir
    )


class FakeLog:
    """What the fake CLIs of the servers started in a folder said they saw. They say it on
    stderr (FAKE_CLAUDE_LOG=-), which tailagent logs: from inside their sandboxes no file
    of the test's is theirs to write. `path` is the folder's `fake.log` for the shape of
    the calls; what FAKE_CLAUDE_LOG is given is `str(log.path)`, "-"."""

    MARKER = "fake-claude-log: "

    def __init__(self, path: Path) -> None:
        self.folder = path.parent
        self.path = "-"

    def entries(self) -> list[dict[str, Any]]:
        lines = [
            line.split(self.MARKER, 1)[1]
            for log in sorted(self.folder.glob("server-*.log"))
            for line in log.read_text().splitlines()
            if self.MARKER in line
        ]
        return [json.loads(line) for line in lines]

    def permission_responses(self) -> list[dict[str, Any]]:
        return [e["permission_response"] for e in self.entries() if "permission_response" in e]

    def argvs(self) -> list[list[str]]:
        return [e["argv"] for e in self.entries() if "argv" in e]


@pytest.fixture(scope="module")
def claude(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, FakeLog]]:
    tmp = tmp_path_factory.mktemp("claude")
    log = FakeLog(tmp / "fake.log")
    server = start_claude(tmp, env={**os.environ, "FAKE_CLAUDE_LOG": str(log.path)})
    yield server, log
    assert server.stop() == 0


@pytest.fixture
def agent(claude: tuple[RunningServer, FakeLog]) -> A2A:
    return A2A(claude[0].url, claude[0].token)


def answer(turn) -> str:  # type: ignore[no-untyped-def]
    return "".join(texts(a.artifact) for a in turn.artifacts("response"))


async def test_a_plain_turn(agent: A2A) -> None:
    turn = await agent.turn("hello")
    assert turn.final_state == "completed"
    assert "echo: hello" in answer(turn)
    outcome = MessageToDict(turn.statuses[-1].metadata)
    assert outcome["costUsd"] == pytest.approx(0.0123)
    assert outcome["usage"]["numTurns"] >= 1


async def test_messages_map_to_the_event_vocabulary(agent: A2A) -> None:
    turn = await agent.turn("think todo write edit")
    assert texts(turn.artifacts("thinking")[0].artifact).startswith("considering:")
    entries = data_parts(turn.artifacts("plan")[-1].artifact)[0]["entries"]
    assert [e["status"] for e in entries] == ["completed", "in_progress"]
    assert turn.artifacts("diff:new.txt") and turn.artifacts("diff:calc.py")
    assert "+    return a + b" not in texts(turn.artifacts("diff:calc.py")[0].artifact)
    assert "+a + b" in texts(turn.artifacts("diff:calc.py")[0].artifact)
    kinds = turn.kinds()
    assert kinds.count("tool_use") == 2 and kinds.count("tool_result") >= 2


async def test_a_question_answered_by_data_part_and_by_text(agent: A2A) -> None:
    asked = await agent.turn("question")
    assert asked.pending["kind"] == "ask_user_question"
    data = {"answers": {"Which colour do you prefer?": "red"}}
    done = await agent.turn(user_message("", task_id=asked.task_id, data=data))
    assert "you chose red" in answer(done)
    asked = await agent.turn("question")
    done = await agent.turn(user_message("blue", task_id=asked.task_id))
    assert "you chose blue" in answer(done)


async def test_a_permission_allowed(agent: A2A) -> None:
    asked = await agent.turn("bash")
    assert asked.pending["toolName"] == "Bash"
    assert asked.pending["input"] == {"command": "rm -rf build"}
    done = await agent.turn(user_message("yes", task_id=asked.task_id))
    assert "ran: rm -rf build" in answer(done)


async def test_a_denial_carries_the_callers_reason_to_claude(
    agent: A2A, claude: tuple[RunningServer, FakeLog]
) -> None:
    asked = await agent.turn("bash:logs")
    done = await agent.turn(user_message("no, run pytest -x instead", task_id=asked.task_id))
    assert done.final_state == "completed"
    sent = claude[1].permission_responses()[-1]
    assert sent["behavior"] == "deny"
    assert "no, run pytest -x instead" in sent["message"]
    assert "Do not request the same permission again" in sent["message"]
    assert "interrupt" not in sent


async def test_the_same_denied_request_twice_fails_the_task_with_an_interrupt(
    agent: A2A, claude: tuple[RunningServer, FakeLog]
) -> None:
    asked = await agent.turn("bash:cache bash:cache")
    done = await agent.turn(user_message("no", task_id=asked.task_id))
    assert done.final_state == "failed"
    assert "same denied permission again (Bash)" in texts(done.last_message)
    terminal = [s for s in done.statuses if state_name(s.status.state) in ("failed", "completed")]
    assert len(terminal) == 1
    assert claude[1].permission_responses()[-1].get("interrupt") is True


async def test_max_permission_denials(tmp_path: Path) -> None:
    server = start_claude(tmp_path, "max_permission_denials = 2\n")
    try:
        agent = A2A(server.url, server.token)
        turn = await agent.turn("bash:a bash:b bash:c")
        turn = await agent.turn(user_message("no", task_id=turn.task_id))
        assert turn.final_state == "input_required"
        turn = await agent.turn(user_message("no", task_id=turn.task_id))
        assert turn.final_state == "failed"
        assert "2 permission denials in this task (limit 2)" in texts(turn.last_message)
    finally:
        server.stop()


async def test_cancel_while_working(agent: A2A, claude: tuple[RunningServer, FakeLog]) -> None:
    async with agent.client() as client:
        stream = client.send_message(SendMessageRequest(message=user_message("slow 20")))
        first = await anext(stream)
        await anext(stream)
        canceled = await agent.cancel(first.task.id)
        assert state_name(canceled.status.state) == "canceled"
        await asyncio.wait_for(stream.aclose(), 5)
    assert {"interrupt": True} in claude[1].entries()
    after = await agent.turn(user_message("after", context_id=first.task.context_id))
    assert after.final_state == "completed" and "echo: after" in answer(after)


async def test_cancel_while_parked(agent: A2A) -> None:
    asked = await agent.turn("bash:parked")
    canceled = await agent.cancel(asked.task_id)
    assert state_name(canceled.status.state) == "canceled"
    after = await agent.turn(user_message("after", context_id=asked.context_id))
    assert after.final_state == "completed"


async def test_no_login_fails_the_task_with_what_to_do(agent: A2A) -> None:
    turn = await agent.turn("nologin")
    assert turn.final_state == "failed"
    # `claude` is seldom on PATH: the advice names the CLI the SDK really runs.
    assert f"run `{FAKE_CLI}` once as that user and log in" in texts(turn.last_message)
    assert "Not logged in" not in answer(turn)


def test_a_server_without_a_claude_login_says_so_at_start(tmp_path: Path) -> None:
    home = tmp_path / "home"  # no ~/.claude, no key
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    server = start_claude(tmp_path, env={**env, "HOME": str(home)})
    try:
        # The line every agent without a login says (tests/test_agent_logins.py).
        [line] = [x for x in server.log().splitlines() if " has no login for " in x]
        match = START_LINE.search(line)
        assert match is not None, line
        assert match.group(1) == "Claude Code"
        assert match.group(3).startswith(f"no login found in {home}/.claude/.credentials.json")
        assert match.group(4).startswith(f"run `{FAKE_CLI}` once as that user and log in")
    finally:
        server.stop()


async def test_deny_mode_refuses_without_asking(tmp_path: Path) -> None:
    server = start_claude(tmp_path, 'permission_prompts = "deny"\n')
    try:
        turn = await A2A(server.url, server.token).turn("bash")
        assert turn.final_state == "completed"
        assert "denied: tailagent denies every permission prompt" in answer(turn)
    finally:
        server.stop()


async def test_a_follow_up_resumes_the_claude_session_after_a_restart(tmp_path: Path) -> None:
    log = FakeLog(tmp_path / "fake.log")
    env = {**os.environ, "FAKE_CLAUDE_LOG": str(log.path)}
    first = start_claude(tmp_path, env=env)
    try:
        turn = await A2A(first.url, first.token).turn("hello")
    finally:
        first.stop()
    session_id = MessageToDict(turn.statuses[-1].metadata)["agentSessionId"]
    second = start_claude(tmp_path, env=env, state_dir=first.state_dir)
    try:
        again = await A2A(second.url, second.token).turn(
            user_message("again", context_id=turn.context_id)
        )
        assert again.final_state == "completed"
        # A warm spare may start before or after the resumed CLI: look at every start.
        assert any(f"--resume={session_id}" in argv for argv in log.argvs()[1:])
        notices = [texts(s.status.message) for s in again.statuses if kind_of(s) == "notice"]
        assert "Resumed the agent session of this context." in notices
    finally:
        second.stop()


async def test_the_real_bundled_cli_without_credentials_fails_with_the_login_message(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    server = start_server(tmp_path, "--agent", "claude", env=env)
    try:
        turn = await A2A(server.url, server.token).turn("Say hello.")
        assert turn.final_state == "failed"
        said = texts(turn.last_message)
        assert "Claude Code is not logged in for" in said and "/_bundled/claude`" in said
    finally:
        assert server.stop() == 0


async def test_mcp_servers_reach_claude_code(tmp_path: Path) -> None:
    log = FakeLog(tmp_path / "fake.log")
    server = start_claude(
        tmp_path,
        '\n[[mcp_servers]]\nname = "files"\ncommand = "mcp-files"\n',
        env={**os.environ, "FAKE_CLAUDE_LOG": str(log.path)},
    )
    try:
        await A2A(server.url, server.token).turn("hello")
        argv = log.argvs()[-1]
        config = json.loads(argv[argv.index("--mcp-config") + 1])
        assert config["mcpServers"]["files"]["command"] == "mcp-files"
    finally:
        server.stop()


async def test_a_new_conversation_takes_a_connected_spare(tmp_path: Path) -> None:
    """The CLI is started and connected before anyone calls; the first conversation
    gets that session, and another spare is started behind it."""
    log = FakeLog(tmp_path / "fake.log")
    server = start_claude(tmp_path, env={**os.environ, "FAKE_CLAUDE_LOG": str(log.path)})
    try:
        deadline = time.monotonic() + 20
        while not log.argvs():  # the spare, started with the server
            assert time.monotonic() < deadline, server.log()
            await asyncio.sleep(0.05)
        spare = log.argvs()[0]
        turn = await A2A(server.url, server.token).turn("hello")
        assert turn.final_state == "completed"
        session = MessageToDict(turn.statuses[-1].metadata)["agentSessionId"]
        assert f"--session-id={session}" in spare
        while len(log.argvs()) < 2:  # its replacement
            assert time.monotonic() < deadline, server.log()
            await asyncio.sleep(0.05)
        assert f"--session-id={session}" not in log.argvs()[1]
    finally:
        assert server.stop() == 0


def git_workspace(path: Path) -> None:
    path.mkdir()
    for args in (("init", "-q", "-b", "main"), ("commit", "-q", "--allow-empty", "-m", "start")):
        subprocess.run(
            ["git", "-C", str(path), "-c", "user.name=Dev", "-c", "user.email=d@x", *args],
            check=True,
        )


def current_branch(path: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(path), "branch", "--show-current"], capture_output=True, text=True
    )
    return done.stdout.strip()


async def test_with_worktrees_the_spare_waits_in_the_next_conversations_worktree(
    tmp_path: Path,
) -> None:
    """Claude Code's working directory is fixed when it starts: with a worktree per
    conversation, the spare is started inside a worktree made ahead, and the next new
    conversation gets both, so its first turn is not a cold start."""
    git_workspace(tmp_path / "workspace")
    log = FakeLog(tmp_path / "fake.log")
    server = start_claude(tmp_path, env={**os.environ, "FAKE_CLAUDE_LOG": str(log.path)})
    try:
        deadline = time.monotonic() + 20
        while not log.argvs():
            assert time.monotonic() < deadline, server.log()
            await asyncio.sleep(0.05)
        spare = next(e for e in log.entries() if "argv" in e)
        ready = Path(spare["cwd"])
        assert ready.parent == (server.state_dir / "worktrees").resolve()
        assert ready.name.startswith("+ready-")
        turn = await A2A(server.url, server.token).turn("hello")
        assert turn.final_state == "completed"
        metadata = MessageToDict(turn.statuses[-1].metadata)
        assert f"--session-id={metadata['agentSessionId']}" in spare["argv"]
        record = json.loads(
            (server.state_dir / "worktrees" / f"{turn.context_id}.json").read_text()
        )
        assert record["path"] == str(ready)  # it worked there
        assert record["branch"] == f"tailagent/{turn.context_id[:8]}"
        # A hello changed nothing: its branch is gone, the worktree waits detached for
        # the conversation's next turn.
        assert record["idle"] is True and current_branch(ready) == ""
        while len(log.argvs()) < 2:  # the next spare, in the next worktree made ahead
            assert time.monotonic() < deadline, server.log()
            await asyncio.sleep(0.05)
        following = [e for e in log.entries() if "argv" in e][1]
        assert Path(following["cwd"]).name.startswith("+ready-")
        assert following["cwd"] != spare["cwd"]
    finally:
        assert server.stop() == 0
