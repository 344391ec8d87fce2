"""An agent without a login, through the real CLI and a real server: one WARNING line of
the same form at start for each, then the preset's one-line hint at once at a turn, one
WARNING in the log for it, no traceback (tests/fake_acp_agent.py stands in for
the preset's agent, as a local install with `--agent-command` does)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tailagent.agents.acp.presets import PRESETS
from tests.conftest import RunningServer, start_server
from tests.warm_start import cli_run

FAKE = Path(__file__).with_name("fake_acp_agent.py")


def serve_preset(tmp: Path, preset: str, *flags: str) -> RunningServer:
    """`serve --agent PRESET` running the fake agent, with a data home (where OpenCode
    keeps its login) that holds none."""
    data = tmp / "data"
    data.mkdir()
    keys = {name for p in PRESETS.values() for name in p.credential_env}
    env = {k: v for k, v in os.environ.items() if k not in keys and not k.startswith("XDG_")}
    command = " ".join([sys.executable, str(FAKE), "--log", "-", *flags])
    return start_server(tmp, "--agent", preset, "--agent-command", command,
                        env={**env, "XDG_DATA_HOME": str(data)})  # fmt: skip


def call(server: RunningServer) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = cli_run(
        [sys.executable, "-m", "tailagent", "call", "--url", server.url, "--token", server.token,
         "hello"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip
    return done, time.monotonic() - started


def warnings_and_errors(server: RunningServer) -> list[str]:
    """What the log warns of after the start: not its word that agents in a root-owned
    shared workspace run as root (these servers run as root in a plain folder), nor
    its line on the agent's missing login (tested below)."""
    return [
        line
        for line in server.log().splitlines()
        if (" WARNING " in line or " ERROR " in line)
        and "(isolation shared)" not in line
        and " has no login for " not in line
    ]


def test_a_refused_session_gives_the_presets_hint_and_one_warning(tmp_path: Path) -> None:
    """Like codex, gemini, copilot and qwen: session/new answers "auth required"."""
    server = serve_preset(tmp_path, "gemini", "--auth-required")
    try:
        done, _ = call(server)
        assert done.returncode == 1
        assert "needs a login on the server: run `npx -y @google/gemini-cli` once" in done.stdout
        noted = warnings_and_errors(server)
        assert len(noted) == 1 and " WARNING " in noted[0], noted
        assert "npx -y @google/gemini-cli" in noted[0]
        assert "Traceback" not in server.log()
    finally:
        server.stop()


def test_opencode_without_a_login_is_refused_before_its_session(tmp_path: Path) -> None:
    """OpenCode opens a session without a login and fails the turn minutes later: with no
    auth.json and no provider key, the turn is refused at once, the agent never asked.
    A login made while the server runs is found at the next turn (the same server: a
    restart would prove nothing more)."""
    server = serve_preset(tmp_path, "opencode")
    try:
        done, took = call(server)
        assert done.returncode == 1
        assert "needs a login on the server: run `npx -y opencode-ai auth login`" in done.stdout
        assert took < 30
        assert "lifecycle: new" not in server.log()
        noted = warnings_and_errors(server)
        assert len(noted) == 1 and " WARNING " in noted[0], noted
        assert "Traceback" not in server.log()
        auth = tmp_path / "data" / "opencode" / "auth.json"
        auth.parent.mkdir(parents=True)
        auth.write_text('{"anthropic": {"type": "api", "key": "k"}}')
        done, _ = call(server)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "lifecycle: new" in server.log()
    finally:
        server.stop()


# Each agent tailagent knows a login place of, without any login, and the words its
# one start line names: its title, and where its hint says to go.
WITHOUT_LOGIN = {
    "claude-acp": ("Claude Code", "npx -y @agentclientprotocol/claude-agent-acp --cli auth login"),
    "codex": ("Codex", "npx -y @openai/codex login --device-auth"),
    "gemini": ("Gemini CLI", "npx -y @google/gemini-cli"),
    "opencode": ("OpenCode", "npx -y opencode-ai auth login"),
    "copilot": ("GitHub Copilot CLI", "npx -y @github/copilot"),
    "qwen": ("Qwen Code", "npx -y @qwen-code/qwen-code"),
}  # fmt: skip
START_LINE = re.compile(
    r"WARNING tailagent\.agents: (.+) has no login for (\S+): (no login found in .+)\. "
    r"To log it in, (.+)\. Until then every task fails\.$"
)


def serve_without_home(tmp: Path, preset: str, **more: str) -> RunningServer:
    """`serve_preset` with a HOME of its own, which holds no agent's login."""
    home = tmp / "home"
    home.mkdir()
    keys = {name for p in PRESETS.values() for name in p.credential_env}
    env = {k: v for k, v in os.environ.items() if k not in keys and not k.startswith("XDG_")}
    command = " ".join([sys.executable, str(FAKE), "--log", "-"])
    return start_server(tmp, "--agent", preset, "--agent-command", command,
                        env={**env, "HOME": str(home), **more})  # fmt: skip


def login_lines(server: RunningServer) -> list[str]:
    return [line for line in server.log().splitlines() if " has no login for " in line]


@pytest.mark.parametrize("preset", sorted(WITHOUT_LOGIN))
def test_every_preset_without_a_login_says_so_at_start_alike(tmp_path: Path, preset: str) -> None:
    """One WARNING line as the server starts, before any caller: who has no login, what
    was looked for, and the command that gives it one (Claude Code's, through the SDK,
    is the same line: test_claude.py)."""
    server = serve_without_home(tmp_path, preset)
    try:
        [line] = login_lines(server)
        title, command = WITHOUT_LOGIN[preset]
        match = START_LINE.search(line)
        assert match is not None, line
        assert match.group(1) == title
        assert str(tmp_path / "home") in match.group(3)
        assert f"`{command}" in match.group(4)  # the command that gives it one
        assert server.log().index(line) < server.log().index("serving on")
    finally:
        server.stop()


def test_a_preset_with_its_key_set_says_nothing_of_a_login(tmp_path: Path) -> None:
    server = serve_without_home(tmp_path, "codex", CODEX_API_KEY="sk-test")
    try:
        assert login_lines(server) == []
    finally:
        server.stop()
