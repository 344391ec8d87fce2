"""tailagent's own tools (list_peers, delegate) as an agent reaches them: a real ACP agent
(tests/fake_acp_agent.py) starts tailagent's stdio MCP server and calls it with the
`mcp` package's client, fenced by bwrap or not; the fake Claude Code CLI calls the
in-process SDK MCP server over claude-agent-sdk's control protocol. The turn's tools
are a double given in TurnOptions, as the bridge gives the real Delegator."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tailagent.agents.acp.backend import AcpBackend
from tailagent.agents.acp.presets import CUSTOM
from tailagent.agents.claude import ClaudeBackend
from tailagent.agents.events import (
    AgentEvent,
    DelegationFailed,
    PermissionAsked,
    Progress,
    PromptText,
    Text,
    TurnDone,
    TurnOptions,
)
from tailagent.agents.registry import agent_programs
from tailagent.config import AgentSettings, ClaudeSettings, SandboxSettings, Settings
from tailagent.delegation.tool_socket import ToolSockets
from tailagent.sandbox.fences import TOOLS_INSIDE, Sandbox
from tests.test_acp import agent_command, start_acp
from tests.test_claude import FAKE_CLI
from tests.warm_start import cli_run

PEERS = [{"name": "devbox-2", "url": "https://devbox-2.tail.example.ts.net", "agent": "echo"}]


class Tools:
    """The turn's tools: records each hand-off and reports two steps of progress."""

    def __init__(self, refuse: str = "") -> None:
        self.calls: list[tuple[str, str, str | None]] = []
        self.refuse = refuse

    async def list_peers(self) -> list[dict[str, Any]]:
        return PEERS

    async def delegate(
        self,
        peer: str,
        message: str,
        conversation: str | None = None,
        progress: Progress | None = None,
    ) -> str:
        self.calls.append((peer, message, conversation))
        if self.refuse:
            raise DelegationFailed(self.refuse)
        if progress is not None:
            await progress(f"{peer} started")
            await progress(f"{peer} ran the tests")
        return f"{peer} answered: {message} is done"


def word(tool: str, args: dict[str, Any] | None = None) -> str:
    encoded = base64.b64encode(json.dumps(args).encode()).decode() if args is not None else ""
    return f"mcp:{tool}:{encoded}" if encoded else f"mcp:{tool}"


def said(events: list[AgentEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, Text))


@pytest.fixture
async def sockets() -> AsyncIterator[ToolSockets]:
    made = ToolSockets()  # the runtime dir: /tmp or XDG_RUNTIME_DIR, a short path
    yield made
    made.close()


async def acp_turns(
    tmp_path: Path,
    sockets: ToolSockets,
    prompts: list[tuple[str, TurnOptions | None]],
    sandbox: Sandbox | None = None,
) -> list[list[AgentEvent]]:
    workspace = tmp_path / "work"
    workspace.mkdir(exist_ok=True)
    settings = AgentSettings(warm_spares=0, cancel_timeout=2, start_timeout=30)
    backend = AcpBackend(
        CUSTOM, workspace, settings, agent_command(), sandbox=sandbox, tool_channels=sockets
    )
    session = await backend.open_session()
    try:
        return [[e async for e in session.prompt([PromptText(p)], o)] for p, o in prompts]
    finally:
        await session.close()
        await backend.aclose()


async def test_an_acp_agent_hands_work_on_through_tailagents_mcp_server(
    tmp_path: Path, sockets: ToolSockets
) -> None:
    tools = Tools()
    hand_off = word("delegate", {"peer": "devbox-2", "message": "run the tests"})
    [peers, handed] = await acp_turns(
        tmp_path,
        sockets,
        [("mcp:list_peers", TurnOptions(tools=tools)), (hand_off, TurnOptions(tools=tools))],
    )
    assert json.loads(said(peers).split("mcp list_peers said: ")[1].split("\n")[0]) == PEERS
    text = said(handed)
    assert "mcp progress: devbox-2 started\nmcp progress: devbox-2 ran the tests\n" in text
    assert "mcp delegate said: devbox-2 answered: run the tests is done\n" in text
    assert tools.calls == [("devbox-2", "run the tests", None)]
    assert isinstance(handed[-1], TurnDone)


async def test_a_refused_hand_off_and_a_call_outside_a_turns_tools_are_errors_the_agent_reads(
    tmp_path: Path, sockets: ToolSockets
) -> None:
    declined = Tools(refuse="the person declined")
    hand_off = word("delegate", {"peer": "devbox-2", "message": "rm -rf build"})
    [refused, toolless] = await acp_turns(
        tmp_path, sockets, [(hand_off, TurnOptions(tools=declined)), (hand_off, None)]
    )
    assert "mcp delegate error: " in said(refused)
    assert "the person declined" in said(refused)
    assert "no person's turn is running" in said(toolless)
    assert declined.calls == [("devbox-2", "rm -rf build", None)]


async def test_a_fenced_agent_reaches_its_own_socket_and_nothing_else_of_the_server(
    tmp_path: Path, sockets: ToolSockets
) -> None:
    # The agent's files as the server shows them: this venv, the fake agent, and the
    # tailagent package its MCP server runs (all hidden where they live under /tmp).
    programs = agent_programs(Settings(agent_command=agent_command()))
    sandbox = Sandbox(
        SandboxSettings(), agent="custom", state_dir=tmp_path / "state", programs=programs
    )
    await sandbox.start()  # no bwrap here fails the test: the fence is the point
    assert sandbox.on
    other = await sockets.open(tmp_path / "another-conversation")  # another agent's
    server = tmp_path / "state" / "server.sock"  # one of the server's own sockets
    server.parent.mkdir(parents=True, exist_ok=True)
    listening = await asyncio.start_unix_server(lambda r, w: w.close(), server)
    tools = Tools()
    try:
        own = TOOLS_INSIDE / "tools.sock"
        probes = f"connect:{own} connect:{other.path} connect:{server}"
        hand_off = word("delegate", {"peer": "devbox-2", "message": "build it"})
        [reached, handed] = await acp_turns(
            tmp_path,
            sockets,
            [(probes, None), (hand_off, TurnOptions(tools=tools))],
            sandbox=sandbox,
        )
    finally:
        listening.close()
        await other.close()
        await sandbox.aclose()
    text = said(reached)
    assert f"connect {own}: ok\n" in text
    assert f"connect {other.path}: FileNotFoundError" in text
    assert f"connect {server}: FileNotFoundError" in text
    assert "mcp progress: devbox-2 started\n" in said(handed)
    assert "mcp delegate said: devbox-2 answered: build it is done\n" in said(handed)


async def test_claude_calls_the_sdk_mcp_tools_without_asking_a_second_time(
    tmp_path: Path,
) -> None:
    settings = ClaudeSettings(cli_path=FAKE_CLI)
    backend = ClaudeBackend(settings, tmp_path, max_sessions=1, own_tools=True)
    await backend.start()
    tools = Tools()
    session = await backend.open_session()
    hand_off = word("delegate", {"peer": "devbox-2", "message": "run the tests"})
    try:
        options = TurnOptions(tools=tools)
        listed = [e async for e in session.prompt([PromptText("mcp:list_peers")], options)]
        handed = [e async for e in session.prompt([PromptText(hand_off)], options)]
        toolless = [e async for e in session.prompt([PromptText(hand_off)])]
    finally:
        await session.close()
        await backend.aclose()
    assert json.loads(said(listed).split("mcp list_peers said: ")[1].split("echo:")[0]) == PEERS
    assert "mcp delegate said: devbox-2 answered: run the tests is done" in said(handed)
    assert "mcp delegate error: no person's turn is running" in said(toolless)
    assert not any(isinstance(e, PermissionAsked) for e in [*listed, *handed, *toolless])
    assert tools.calls == [("devbox-2", "run the tests", None)]


def test_a_servers_acp_agent_has_the_tools_and_a_tokens_turn_is_told_no_person_asked(
    tmp_path: Path,
) -> None:
    # A runtime directory of its own (short: a socket's path is bounded), to see the
    # server's tool sockets made there and gone after it stops.
    runtime = Path(tempfile.mkdtemp(prefix="ta-run-"))
    server = start_acp(tmp_path, env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)})
    try:
        hand_off = word("delegate", {"peer": "devbox-2", "message": "run the tests"})
        called = cli_run(
            [sys.executable, "-m", "tailagent", "call", "--url", server.url,
             "--token", server.token, hand_off],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert called.returncode == 0, called.stdout + called.stderr + server.log()
        assert "mcp delegate error: " in called.stdout
        assert "no person's turn is running" in called.stdout
        assert "(not for a token, this box's local token or a tagged node)" in called.stdout
        assert [p.name for p in runtime.glob("tailagent-*/*/*")] == ["tools.sock"]
    finally:
        stopped = server.stop()
    assert stopped == 0, server.log()
    assert list(runtime.iterdir()) == []  # no socket, nor its folders, left behind
    runtime.rmdir()
