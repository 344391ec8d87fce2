"""A server started with `--agent-command` names what it runs, wherever it names its agent:
its start line, `tailagent doctor`, and its card (tests/fake_acp_agent.py as the command,
run by this venv's interpreter, both named by the last part of their paths)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx

from tests.conftest import start_server
from tests.warm_start import cli_run

FAKE = Path(__file__).with_name("fake_acp_agent.py")
COMMAND = f"{sys.executable} {FAKE} --log -"
SHOWN = f"{Path(sys.executable).name} fake_acp_agent.py --log -"


def test_a_custom_command_is_named_in_the_start_line_doctor_and_the_card(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--agent-command", COMMAND)
    try:
        log = server.log()
        assert f"serving on {server.url} (agent `{SHOWN}`, workspace " in log, log
        assert "(agent claude" not in log
        done = cli_run(
            [sys.executable, "-m", "tailagent", "doctor", "--json", "--state-dir",
             str(server.state_dir)], capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        agent = next(c for c in json.loads(done.stdout) if c["name"] == "agent")
        assert agent["detail"] == f"ACP agent `{SHOWN}` (the running server's)", agent
        card = httpx.get(f"{server.url}/.well-known/agent-card.json", timeout=10).json()
        # The card is any caller's to read: the program, not its options' values.
        program = f"`{Path(sys.executable).name} fake_acp_agent.py`"
        assert f"An ACP agent ({program}), working in workspace." in card["description"]
        assert card["skills"][0]["description"].startswith(f"An ACP agent ({program}) reads")
        assert "--log" not in json.dumps(card)
    finally:
        server.stop()


def test_a_preset_run_with_a_command_of_its_own_names_both(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--agent", "gemini", "--agent-command", COMMAND)
    try:
        assert f"(agent gemini as `{SHOWN}`, workspace " in server.log()
    finally:
        server.stop()
