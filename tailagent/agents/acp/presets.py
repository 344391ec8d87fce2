"""The agents tailagent knows by name, and what each needs from the environment.

An agent process never inherits the server's whole environment: it gets a small
allowlist, plus the variables its own credentials live in, plus any the operator
names in `agent.env_passthrough`.
"""

from __future__ import annotations

import itertools
import os
import shlex
from dataclasses import dataclass

from tailagent.agents.modes import CLAUDE_CODE, CODEX, GEMINI

BASE_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TMPDIR", "TZ",
    "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
    "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR",
    "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy",
)  # fmt: skip
BASE_ENV_PREFIXES = ("LC_", "NPM_CONFIG_", "npm_config_")


@dataclass(frozen=True, slots=True)
class Preset:
    name: str
    title: str
    package: str | None  # the npm package `npx -y` runs; None for a plain command
    args: tuple[str, ...]
    credential_env: tuple[str, ...]
    login_hint: str
    # The agent's modes a caller who is not admin may choose (agents/modes.py).
    caller_modes: tuple[str, ...] = ()


PRESETS = {
    "claude-acp": Preset(
        "claude-acp",
        "Claude Code (through claude-agent-acp)",
        "@agentclientprotocol/claude-agent-acp",
        (),
        ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL", "CLAUDE_CONFIG_DIR",
         "CLAUDE_CODE_OAUTH_TOKEN", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX",
         "CLAUDE_CODE_EXECUTABLE"),
        "log in with the Claude Code CLI once on the server as the service's user "
        "(`npx -y @agentclientprotocol/claude-agent-acp --cli auth login`), or set "
        "ANTHROPIC_API_KEY in its environment",
        CLAUDE_CODE,
    ),
    "codex": Preset(
        "codex",
        "Codex (through codex-acp)",
        "@agentclientprotocol/codex-acp",
        (),
        ("CODEX_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "CODEX_HOME", "CODEX_PATH"),
        "run `npx -y @openai/codex login --device-auth` on the server as the service's user, "
        "or set CODEX_API_KEY or OPENAI_API_KEY",
        CODEX,
    ),
    "gemini": Preset(
        "gemini",
        "Gemini CLI",
        "@google/gemini-cli",
        ("--acp",),
        ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_CLOUD_PROJECT",
         "GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_GENAI_USE_VERTEXAI"),
        "run `npx -y @google/gemini-cli` once on the server as the service's user to log in "
        "(organization Code Assist plans), or set GEMINI_API_KEY",
        GEMINI,
    ),
    "opencode": Preset(
        "opencode",
        "OpenCode",
        "opencode-ai",
        ("acp",),
        ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OPENROUTER_API_KEY",
         "OPENCODE_CONFIG"),
        "run `npx -y opencode-ai auth login` on the server as the service's user, or set the "
        "provider's API key (ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY or "
        "OPENROUTER_API_KEY)",
    ),
    "copilot": Preset(
        "copilot",
        "GitHub Copilot CLI",
        "@github/copilot",
        ("--acp",),
        ("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN", "COPILOT_HOME", "GH_HOST",
         "COPILOT_GH_HOST"),
        "run `npx -y @github/copilot` once on the server as the service's user and `/login`, "
        "or set COPILOT_GITHUB_TOKEN (a fine-grained token with the Copilot Requests "
        "permission)",
    ),
    "qwen": Preset(
        "qwen",
        "Qwen Code",
        "@qwen-code/qwen-code",
        ("--acp",),
        ("DASHSCOPE_API_KEY", "BAILIAN_CODING_PLAN_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL",
         "OPENAI_MODEL", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"),
        "run `npx -y @qwen-code/qwen-code` once on the server as the service's user and "
        "`/auth`, or set an API key (DASHSCOPE_API_KEY, OPENAI_API_KEY, ANTHROPIC_API_KEY or "
        "GEMINI_API_KEY)",
    ),
}  # fmt: skip

CUSTOM = Preset("acp", "an ACP agent", None, (), (), "log the agent in on the server")


def command_line(preset: Preset, version: str | None, custom: str | None) -> list[str]:
    """The argv that starts the agent: `npx -y PACKAGE[@VERSION] ARGS`, or the custom one."""
    if custom is not None:
        return shlex.split(custom)
    assert preset.package is not None
    package = f"{preset.package}@{version}" if version else preset.package
    return ["npx", "-y", package, *preset.args]


COMMAND_SHOWN = 60  # characters of an agent command that a line names


def shown_command(command: str, options: bool = True) -> str:
    """An agent command as a line names it: each path by its last part (a venv's
    `/home/me/x/.venv/bin/python` is `python`), cut to COMMAND_SHOWN characters.
    Without `options`, only the words before the first option, whose values may be
    secrets: what a caller is shown."""
    try:
        words = shlex.split(command)
    except ValueError:  # the start refuses it; a line still says what was given
        words = command.split()
    if not options:
        words = list(itertools.takewhile(lambda w: not w.startswith("-"), words))
    paths = ("/", "./", "../", "~")
    short = shlex.join(os.path.basename(w) or w if w.startswith(paths) else w for w in words)
    return short if len(short) <= COMMAND_SHOWN else short[: COMMAND_SHOWN - 1] + "…"


def agent_environment(
    source: dict[str, str], preset: Preset, passthrough: tuple[str, ...]
) -> dict[str, str]:
    allowed = set(BASE_ENV) | set(preset.credential_env) | set(passthrough)
    return {
        key: value
        for key, value in source.items()
        if key in allowed or key.startswith(BASE_ENV_PREFIXES)
    }
