"""Claude Code, two ways: through the Claude Agent SDK in tailagent's own backend
(`claude`), and as an ACP preset through claude-agent-acp (`claude-acp`). Both run the
same CLI, so they share its login, its home and its modes."""

from __future__ import annotations

from tailagent.agent_kinds.kind import AgentHome, AgentKind, LoginPlace

# Claude Code's permission modes a caller may choose: `acceptEdits` (its default here)
# writes files without asking and still asks before any other command. Not listed:
# `bypassPermissions`, `dontAsk` (denies unasked) and `auto` (a classifier approves in
# the caller's place).
CLAUDE_CODE_MODES = ("default", "acceptEdits", "plan")

_LOGIN = LoginPlace(
    keys=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
          "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"),
    files=(".credentials.json",),
    home_env="CLAUDE_CONFIG_DIR",
    home=".claude",
)  # fmt: skip
_HOME = AgentHome(
    writable=(".claude", ".claude.json"),
    logins=(".claude/.credentials.json",),
    fixed=(".claude/settings.json",),
    hosts=("api.anthropic.com", "statsig.anthropic.com", "console.anthropic.com", "claude.ai"),
    keys=("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN"),
)
_ENV = ("ANTHROPIC_BASE_URL", "CLAUDE_CONFIG_DIR", "CLAUDE_CODE_EXECUTABLE")

CLAUDE = AgentKind(
    name="claude",
    title="Claude Code (through the Claude Agent SDK)",
    env=_ENV,
    login=_LOGIN,
    # Its hint names where its CLI is, which only the running backend knows
    # (agents/claude.py login_hint).
    caller_modes=CLAUDE_CODE_MODES,
    home=_HOME,
)

CLAUDE_ACP = AgentKind(
    name="claude-acp",
    title="Claude Code (through claude-agent-acp)",
    package="@agentclientprotocol/claude-agent-acp",
    env=_ENV,
    login=_LOGIN,
    login_hint="log in with the Claude Code CLI once on the server as the service's user "
    "(`npx -y @agentclientprotocol/claude-agent-acp --cli auth login`), or set "
    "ANTHROPIC_API_KEY in its environment",
    caller_modes=CLAUDE_CODE_MODES,
    home=_HOME,
)
