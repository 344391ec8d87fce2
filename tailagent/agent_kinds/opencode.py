"""OpenCode, an ACP preset (`opencode acp`). Nobody has looked at its modes yet, so
only admins choose one."""

from __future__ import annotations

from tailagent.agent_kinds.kind import AgentHome, AgentKind, LoginPlace

OPENCODE = AgentKind(
    name="opencode",
    title="OpenCode",
    package="opencode-ai",
    args=("acp",),
    login=LoginPlace(
        keys=(
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "GEMINI_API_KEY",
            "OPENROUTER_API_KEY",
            "OPENCODE_CONFIG",
        ),
        files=("auth.json",),
        home_env="XDG_DATA_HOME",
        home=".local/share/opencode",
        unknowable=(
            ("../../../.config/opencode/opencode.json", '"provider"'),
            ("../../../.config/opencode/opencode.jsonc", '"provider"'),
        ),
    ),
    login_hint="run `npx -y opencode-ai auth login` on the server as the service's user, or "
    "set the provider's API key (ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY or "
    "OPENROUTER_API_KEY)",
    # Without a login it opens the session on its own free provider and fails the first
    # prompt only after minutes of retries ("Cannot connect to API").
    silent_without_login=True,
    home=AgentHome(
        writable=(".local/share/opencode", ".local/state/opencode"),
        logins=(".local/share/opencode/auth.json",),
        hosts=("opencode.ai", "api.anthropic.com", "api.openai.com"),
    ),
)
