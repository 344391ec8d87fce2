"""The agents an ACP preset runs, and what each is given of the environment.

An agent process never inherits the server's whole environment: it gets a small
allowlist, plus the variables its own credentials live in, plus any the operator
names in `agent.env_passthrough`.
"""

from __future__ import annotations

import itertools
import os
import shlex

from tailagent.agent_kinds import KINDS
from tailagent.agent_kinds.kind import AgentKind

BASE_ENV = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "TERM", "TMPDIR", "TZ",
    "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
    "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "SSL_CERT_DIR",
    "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy",
)  # fmt: skip
BASE_ENV_PREFIXES = ("LC_", "NPM_CONFIG_", "npm_config_")


# The agents an ACP preset runs: those with an npm package (agent_kinds/ describes each).
PRESETS = {name: kind for name, kind in KINDS.items() if kind.package is not None}

# A command of the operator's: an ACP agent tailagent knows nothing of.
CUSTOM = AgentKind("acp", "an ACP agent", login_hint="log the agent in on the server")


def command_line(preset: AgentKind, version: str | None, custom: str | None) -> list[str]:
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
    source: dict[str, str], preset: AgentKind, passthrough: tuple[str, ...]
) -> dict[str, str]:
    allowed = set(BASE_ENV) | set(preset.credential_env) | set(passthrough)
    return {
        key: value
        for key, value in source.items()
        if key in allowed or key.startswith(BASE_ENV_PREFIXES)
    }
