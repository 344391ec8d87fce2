"""Whether an agent has a login on this box, read from where the agent itself keeps it
(its credential file, or a key in its environment), without starting it.

Every agent whose place is known (its description's LoginPlace, in agent_kinds/: Claude
Code through the SDK, and each preset) is looked for at start: a server without its
agent's login still serves (a login may follow), and says so in one WARNING line of the
same form for each (`missing_login`: what is missing, and how to give it one). Most
agents also say so themselves when a session is opened (session/new answers "auth
required" at once). OpenCode does not: without a login it opens the session on its own
free provider and fails the first prompt only after minutes of retries ("Cannot connect
to API"), so its turn is refused before the session, from what this module finds.
`tailagent doctor` looks too.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tailagent.agent_kinds import KINDS
from tailagent.agent_kinds.kind import LoginPlace

# Agents that open a session without a login and fail only at the turn, slowly: their
# missing login is refused before the session, from what this module finds.
SILENT_WITHOUT_LOGIN = frozenset(name for name, kind in KINDS.items() if kind.silent_without_login)


@dataclass(frozen=True, slots=True)
class Login:
    found: bool | None  # None: the agent may keep it where tailagent cannot tell
    detail: str


def _home(where: LoginPlace, env: Mapping[str, str], home: Path) -> Path:
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
    kind = KINDS.get(agent)
    where = kind.login if kind is not None else None
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
