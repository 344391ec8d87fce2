"""Presets: the command each runs, and the environment an agent process may see."""

from __future__ import annotations

from tailagent.agents.acp.presets import CUSTOM, PRESETS, agent_environment, command_line


def test_presets_run_through_npx_with_an_optional_pinned_version() -> None:
    assert command_line(PRESETS["claude-acp"], None, None) == [
        "npx",
        "-y",
        "@zed-industries/claude-agent-acp",
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
        "ANTHROPIC_API_KEY": "sk-ant", "OPENAI_API_KEY": "sk-openai",
        "AWS_SECRET_ACCESS_KEY": "aws", "TAILAGENT_TOKEN": "ta_x", "EXTRA": "1",
    }  # fmt: skip
    claude = agent_environment(server, PRESETS["claude-acp"], ())
    assert set(claude) == {"PATH", "HOME", "LC_ALL", "ANTHROPIC_API_KEY"}
    codex = agent_environment(server, PRESETS["codex"], ("EXTRA",))
    assert set(codex) == {"PATH", "HOME", "LC_ALL", "OPENAI_API_KEY", "EXTRA"}
