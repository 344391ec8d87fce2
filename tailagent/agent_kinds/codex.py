"""OpenAI's Codex, an ACP preset through codex-acp."""

from __future__ import annotations

from tailagent.agent_kinds.kind import AgentHome, AgentKind, LoginPlace

CODEX = AgentKind(
    name="codex",
    title="Codex (through codex-acp)",
    package="@agentclientprotocol/codex-acp",
    env=("OPENAI_BASE_URL", "CODEX_HOME", "CODEX_PATH"),
    login=LoginPlace(
        keys=("CODEX_API_KEY", "OPENAI_API_KEY"),
        files=("auth.json",),
        home_env="CODEX_HOME",
        home=".codex",
    ),
    login_hint="run `npx -y @openai/codex login --device-auth` on the server as the "
    "service's user, or set CODEX_API_KEY or OPENAI_API_KEY",
    # codex-acp's modes (2.x): `workspace-write` edits the workspace and asks before
    # leaving it or using the network; `read-only` asks before any edit. Not listed:
    # `agent`, its default, where an automatic reviewer approves what it deems safe in
    # the caller's place, and `agent-full-access`.
    caller_modes=("read-only", "workspace-write"),
    home=AgentHome(
        writable=(".codex",),
        logins=(".codex/auth.json",),
        fixed=(".codex/config.toml",),
        hosts=("api.openai.com", "chatgpt.com", "auth.openai.com"),
        keys=("CODEX_API_KEY", "OPENAI_API_KEY"),
    ),
)
