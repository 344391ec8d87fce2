"""Google's Gemini CLI, an ACP preset (its own `--acp`)."""

from __future__ import annotations

from tailagent.agent_kinds.kind import AgentHome, AgentKind, LoginPlace

GEMINI = AgentKind(
    name="gemini",
    title="Gemini CLI",
    package="@google/gemini-cli",
    args=("--acp",),
    env=("GOOGLE_CLOUD_PROJECT",),
    login=LoginPlace(
        keys=(
            "GEMINI_API_KEY",
            "GOOGLE_API_KEY",
            "GOOGLE_GENAI_USE_VERTEXAI",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ),
        files=("oauth_creds.json",),
        home_env=None,
        home=".gemini",
        unknowable=((".env", "="),),
    ),
    login_hint="run `npx -y @google/gemini-cli` once on the server as the service's user "
    "to log in (organization Code Assist plans), or set GEMINI_API_KEY",
    # `autoEdit` writes files without asking and still asks before any other command.
    # Not listed: `yolo`.
    caller_modes=("default", "autoEdit", "plan"),
    home=AgentHome(
        writable=(".gemini",),
        logins=(".gemini/oauth_creds.json", ".gemini/google_accounts.json"),
        fixed=(".gemini/settings.json",),
        hosts=(
            "generativelanguage.googleapis.com",
            "cloudcode-pa.googleapis.com",
            "oauth2.googleapis.com",
        ),
        keys=("GEMINI_API_KEY", "GOOGLE_API_KEY"),
    ),
)
