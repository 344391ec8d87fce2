"""Qwen Code, an ACP preset (its own `--acp`). Nobody has looked at its modes yet, so
only admins choose one."""

from __future__ import annotations

from tailagent.agent_kinds.kind import AgentHome, AgentKind, LoginPlace

QWEN = AgentKind(
    name="qwen",
    title="Qwen Code",
    package="@qwen-code/qwen-code",
    args=("--acp",),
    env=("OPENAI_BASE_URL", "OPENAI_MODEL"),
    login=LoginPlace(
        keys=(
            "DASHSCOPE_API_KEY",
            "BAILIAN_CODING_PLAN_API_KEY",
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "GEMINI_API_KEY",
        ),
        files=("oauth_creds.json",),
        home_env=None,
        home=".qwen",
        unknowable=(("settings.json", '"auth"'), (".env", "=")),
    ),
    login_hint="run `npx -y @qwen-code/qwen-code` once on the server as the service's user "
    "and `/auth`, or set an API key (DASHSCOPE_API_KEY, OPENAI_API_KEY, ANTHROPIC_API_KEY "
    "or GEMINI_API_KEY)",
    home=AgentHome(
        writable=(".qwen",),
        logins=(".qwen/oauth_creds.json",),
        fixed=(".qwen/settings.json",),
        hosts=("chat.qwen.ai", "dashscope.aliyuncs.com"),
    ),
)
