"""Whether an agent has a login on this box, read from where the agent itself keeps it
(its credential file, or a key in its environment), without starting it.

Every agent whose place is known here (Claude Code through the SDK, and each preset)
is looked for at start: a server without its agent's login still serves (a login may
follow), and says so in one WARNING line of the same form for each (`missing_login`:
what is missing, and how to give it one). Most agents also say so themselves when a
session is opened (session/new answers "auth required" at once). OpenCode does not:
without a login it opens the session on its own free provider and fails the first
prompt only after minutes of retries ("Cannot connect to API"), so its turn is refused
before the session, from what this module finds. `tailagent doctor` looks too.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Agents that open a session without a login and fail only at the turn, slowly: their
# missing login is refused before the session, from what this module finds.
SILENT_WITHOUT_LOGIN = frozenset({"opencode"})


@dataclass(frozen=True, slots=True)
class Login:
    found: bool | None  # None: the agent may keep it where tailagent cannot tell
    detail: str


@dataclass(frozen=True, slots=True)
class _Where:
    keys: tuple[str, ...]  # variables that are a login by themselves
    files: tuple[str, ...]  # credential files, relative to the agent's home
    home_env: str | None  # the variable that moves the agent's home
    home: str  # its home, relative to the user's home (or under $XDG_DATA_HOME)
    # Files that may set a login up another way, each when it holds its marker (the
    # agent writes some of them itself, empty of any login).
    unknowable: tuple[tuple[str, str], ...] = ()


_CLAUDE_CODE = _Where(("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
                       "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"),
                      (".credentials.json",), "CLAUDE_CONFIG_DIR", ".claude")  # fmt: skip
_WHERE = {
    "claude": _CLAUDE_CODE,  # through the Claude Agent SDK, as through its ACP adapter
    "claude-acp": _CLAUDE_CODE,
    "codex": _Where(("CODEX_API_KEY", "OPENAI_API_KEY"), ("auth.json",), "CODEX_HOME", ".codex"),
    "gemini": _Where(("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI",
                      "GOOGLE_APPLICATION_CREDENTIALS"),
                     ("oauth_creds.json",), None, ".gemini", ((".env", "="),)),
    "opencode": _Where(("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY",
                        "OPENROUTER_API_KEY", "OPENCODE_CONFIG"),
                       ("auth.json",), "XDG_DATA_HOME", ".local/share/opencode",
                       (("../../../.config/opencode/opencode.json", '"provider"'),
                        ("../../../.config/opencode/opencode.jsonc", '"provider"'))),
    "copilot": _Where(("COPILOT_GITHUB_TOKEN", "GH_TOKEN", "GITHUB_TOKEN"),
                      ("config.json",), "COPILOT_HOME", ".copilot"),
    "qwen": _Where(("DASHSCOPE_API_KEY", "BAILIAN_CODING_PLAN_API_KEY", "OPENAI_API_KEY",
                    "ANTHROPIC_API_KEY", "GEMINI_API_KEY"),
                   ("oauth_creds.json",), None, ".qwen",
                   (("settings.json", '"auth"'), (".env", "="))),
}  # fmt: skip


def _home(where: _Where, env: Mapping[str, str], home: Path) -> Path:
    moved = env.get(where.home_env) if where.home_env else None
    if moved and where.home_env == "XDG_DATA_HOME":
        return Path(moved) / Path(where.home).name
    return Path(moved) if moved else home / where.home


def _holds_login(path: Path) -> bool:
    """A credential file that is there and not empty; Copilot's config.json is a login
    only when it names a logged-in user (it is written before any login too)."""
    try:
        text = path.read_text()
    except OSError:
        return False
    if path.name != "config.json":
        return bool(text.strip())
    try:
        lines = [line for line in text.splitlines() if not line.lstrip().startswith("//")]
        config = json.loads("\n".join(lines))
    except ValueError:
        return False
    return isinstance(config, dict) and bool(config.get("logged_in_users"))


def login_of(agent: str, env: Mapping[str, str], home: Path) -> Login:
    """What this box holds of `agent`'s login, for the agent run with `env`."""
    where = _WHERE.get(agent)
    if where is None:
        return Login(None, "tailagent cannot tell where this agent keeps its login")
    keys = [k for k in where.keys if env.get(k)]
    if keys:
        return Login(True, f"{keys[0]} is set")
    base = _home(where, env, home)
    for name in where.files:
        if _holds_login(base / name):
            return Login(True, f"logged in ({base / name})")
    places = " or ".join(str(base / n) for n in where.files)
    for name, marker in where.unknowable:
        path = (base / name).resolve()
        if path.is_file() and marker in path.read_text(errors="replace"):
            return Login(None, f"no login in {places}; {path} may set one")
    return Login(False, f"no login found in {places}, and none of {', '.join(where.keys)} set")


def missing_login(agent: str, title: str, hint: str, env: Mapping[str, str]) -> str | None:
    """The start's line when `agent` (named `title`) has no login for the agent run with
    `env`: what is missing, then `hint`, how to give it one. None when it has one, or
    when tailagent cannot tell (a command of the operator's, a file that may set one)."""
    login = login_of(agent, env, Path(env.get("HOME") or Path.home()))
    if login.found is not False:
        return None
    return (
        f"{title} has no login for {getpass.getuser()}: {login.detail}. To log it in, {hint}. "
        "Until then every task fails."
    )
