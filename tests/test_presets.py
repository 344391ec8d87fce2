"""Presets: the command each runs, and the environment an agent process may see."""

from __future__ import annotations

import pytest

from tailagent.agents.acp.presets import CUSTOM, PRESETS, agent_environment, command_line
from tailagent.config import AGENTS


@pytest.mark.parametrize(
    ("name", "argv"),
    [
        # The maintained adapters (the @zed-industries names stopped at 0.23.1 and 0.16.0).
        ("claude-acp", ["npx", "-y", "@agentclientprotocol/claude-agent-acp"]),
        ("codex", ["npx", "-y", "@agentclientprotocol/codex-acp"]),
        # Agents that speak ACP themselves, started as their own --help says.
        ("gemini", ["npx", "-y", "@google/gemini-cli", "--acp"]),
        ("opencode", ["npx", "-y", "opencode-ai", "acp"]),
        ("copilot", ["npx", "-y", "@github/copilot", "--acp"]),
        ("qwen", ["npx", "-y", "@qwen-code/qwen-code", "--acp"]),
    ],
)
def test_each_preset_runs_its_package_through_npx(name: str, argv: list[str]) -> None:
    assert command_line(PRESETS[name], None, None) == argv
    assert name in AGENTS  # --agent and the config file accept it


def test_a_pinned_version_and_a_custom_command() -> None:
    assert command_line(PRESETS["codex"], "2.6.0", None) == [
        "npx",
        "-y",
        "@agentclientprotocol/codex-acp@2.6.0",
    ]
    assert command_line(PRESETS["gemini"], "0.61.0", None) == [
        "npx",
        "-y",
        "@google/gemini-cli@0.61.0",
        "--acp",
    ]
    assert command_line(CUSTOM, None, "my-agent --acp 'two words'") == [
        "my-agent",
        "--acp",
        "two words",
    ]


def test_an_agent_sees_the_allowlist_and_its_own_credentials_only() -> None:
    server = {
        "PATH": "/usr/bin", "HOME": "/home/dev", "LC_ALL": "C.UTF-8",
        "ANTHROPIC_API_KEY": "sk-ant", "OPENAI_API_KEY": "sk-openai", "CODEX_API_KEY": "sk-c",
        "COPILOT_GITHUB_TOKEN": "github_pat", "COPILOT_ALLOW_ALL": "true",
        "DASHSCOPE_API_KEY": "sk-d", "AWS_SECRET_ACCESS_KEY": "aws", "TAILAGENT_TOKEN": "ta_x",
        "EXTRA": "1",
    }  # fmt: skip
    base = {"PATH", "HOME", "LC_ALL"}
    claude = agent_environment(server, PRESETS["claude-acp"], ())
    assert set(claude) == base | {"ANTHROPIC_API_KEY"}
    codex = agent_environment(server, PRESETS["codex"], ("EXTRA",))
    assert set(codex) == base | {"OPENAI_API_KEY", "CODEX_API_KEY", "EXTRA"}
    # COPILOT_ALLOW_ALL would let Copilot run every tool unasked: never passed on.
    copilot = agent_environment(server, PRESETS["copilot"], ())
    assert set(copilot) == base | {"COPILOT_GITHUB_TOKEN"}
    qwen = agent_environment(server, PRESETS["qwen"], ())
    assert set(qwen) == base | {"DASHSCOPE_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"}
    opencode = agent_environment(server, PRESETS["opencode"], ())
    assert set(opencode) == base | {"ANTHROPIC_API_KEY", "OPENAI_API_KEY"}
