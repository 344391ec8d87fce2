"""GitHub Copilot CLI, an ACP preset (its own `--acp`). Nobody has looked at its modes
yet, so only admins choose one."""

from __future__ import annotations

from tailagent.agent_kinds.kind import AgentHome, AgentKind, LoginPlace

COPILOT = AgentKind(
    name="copilot",
    title="GitHub Copilot CLI",
    package="@github/copilot",
    args=("--acp",),
    env=("COPILOT_HOME", "GH_HOST", "COPILOT_GH_HOST"),
    login=LoginPlace(
        keys=("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN"),
        # A login only when it names a logged-in user: it is written before any login
        # too (agents/acp/logins.py reads it so).
        files=("config.json",),
        home_env="COPILOT_HOME",
        home=".copilot",
    ),
    login_hint="run `npx -y @github/copilot` once on the server as the service's user and "
    "`/login`, or set COPILOT_GITHUB_TOKEN (a fine-grained token with the Copilot Requests "
    "permission)",
    home=AgentHome(
        writable=(".copilot",),
        fixed=(".copilot/config.json",),
        hosts=("api.githubcopilot.com", "api.github.com", "github.com"),
    ),
)
