"""The real claude-agent-acp, with no credentials: the handshake completes and the task
ends failed with the login advice, in bounded time, never a hang."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.a2a_helpers import A2A, texts
from tests.conftest import start_server

VERSION = "0.101.0"  # .ci/run installs the same
PACKAGE = f"@agentclientprotocol/claude-agent-acp@{VERSION}"
# One prefix a version: a bumped pin never finds an older install under the same name.
PREFIX = Path(__file__).resolve().parent.parent / ".cache" / f"claude-agent-acp-{VERSION}"
BINARY = PREFIX / "node_modules" / ".bin" / "claude-agent-acp"  # the package's `bin`


@pytest.fixture(scope="module")
def claude_agent_acp() -> Path:
    """The pinned package from npm (.ci/run installs it; a developer's first run does)."""
    if not BINARY.exists():
        if shutil.which("npm") is None:
            pytest.skip(f"npm is not available, so {PACKAGE} cannot be installed")
        subprocess.run(
            [
                "npm",
                "install",
                "--silent",
                "--no-audit",
                "--no-fund",
                "--prefix",
                str(PREFIX),
                PACKAGE,
            ],
            check=True,
            timeout=600,
        )
    return BINARY


async def test_real_claude_agent_acp_without_credentials(
    claude_agent_acp: Path, tmp_path: Path
) -> None:
    home = tmp_path / "home"  # no ~/.claude: no login
    home.mkdir()
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    server = start_server(
        tmp_path, "--agent", "claude-acp", "--agent-command", str(claude_agent_acp), env=env
    )
    try:
        turn = await A2A(server.url, server.token).turn("Say hello.")
        assert turn.final_state == "failed"
        reason = texts(turn.last_message)
        assert "needs a login on the server" in reason
        assert "log in with the Claude Code CLI" in reason
        assert "`npx -y @agentclientprotocol/claude-agent-acp --cli auth login`" in reason
    finally:
        assert server.stop() == 0
