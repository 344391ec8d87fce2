"""The server's own secrets, kept out of its environment block and out of its children's.

An agent runs as the server's user, and `/proc/<server pid>/environ` showed it what the
server was started with: `TS_AUTHKEY`, a database password in `TAILAGENT_STORE`. That
file is the block the kernel laid out at exec; nothing a process does to its
environment later (unsetenv, putenv) changes it, and root reads it whatever else is
done. So `tailagent serve`, when its environment holds any of them, starts itself
again in the same process (execve keeps the pid, which systemd's Type=notify and
watchdog go by) with a block that lacks them, and hands them over in an anonymous
file (memfd) that it reads and closes at once. From then on they live only here:
not in `os.environ`, so no process the server starts (an agent, a terminal, git, a
hook) is handed them. The config reader and the tsnet key lookup read `environ()`.

The secrets: `TS_AUTHKEY`, `TAILAGENT_TOKEN`, and every `TAILAGENT_<KEY>` that is a
setting (the settings are where a password, a token or an MCP server's headers go).

The one-file binary cannot do all of it: its launcher, the parent that unpacked it,
keeps its own environment block, and that is only warned of.

The server also makes itself not dumpable (PR_SET_DUMPABLE 0): no other process of its
user, an agent included, may read its memory, environ or descriptors through /proc or
ptrace it. Root still may: an agent running as root reads anything of the server's.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import sys

from tailagent.config import ENV_PREFIX
from tailagent.config.sources import PARSERS, _env_name

log = logging.getLogger(__name__)

HANDOVER = "TAILAGENT_SECRETS_FD"  # the memfd's number, in the new block: not a secret
ALWAYS = ("TS_AUTHKEY", "TAILAGENT_TOKEN")
PR_SET_DUMPABLE = 4

_kept: dict[str, str] = {}


def secret_names(environ: dict[str, str]) -> list[str]:
    """The secrets present in `environ`."""
    settings = {_env_name(key) for key in PARSERS}
    return sorted(
        name
        for name in environ
        if name in ALWAYS or (name.startswith(ENV_PREFIX) and name in settings)
    )


def environ() -> dict[str, str]:
    """The environment as the server was started with it, its secrets included."""
    return {**os.environ, **_kept}


def hide() -> None:
    """First thing in `tailagent serve`: moves the secrets out of the environment (a
    new exec, when there are any) and makes the process not dumpable."""
    if HANDOVER in os.environ:
        _receive(os.environ.pop(HANDOVER))
        if getattr(sys, "frozen", False):
            _warn_of_the_launcher()
    elif names := secret_names(dict(os.environ)):
        _restart(names)  # returns only if the exec failed
    _not_dumpable()


def _restart(names: list[str]) -> None:
    secrets = {name: os.environ[name] for name in names}
    fd = os.memfd_create("tailagent-secrets")
    os.write(fd, json.dumps(secrets).encode())
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    block = {k: v for k, v in os.environ.items() if k not in secrets}
    block[HANDOVER] = str(fd)
    frozen = getattr(sys, "frozen", False)  # the one-file binary is its own interpreter
    argv = [sys.executable, *(sys.argv[1:] if frozen else sys.orig_argv[1:])]
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, argv, block)
    except OSError as exc:
        os.close(fd)
        print(
            f"tailagent: warning: could not restart without {', '.join(names)} in the "
            f"environment ({exc.strerror}); an agent may read them in /proc",
            file=sys.stderr,
        )


def _receive(number: str) -> None:
    with os.fdopen(int(number), "rb") as handle:
        _kept.update(json.loads(handle.read()))


def _warn_of_the_launcher() -> None:
    """The one-file binary runs this interpreter as a child of its launcher, which
    waits for it and keeps the environment it was started with: no exec here clears
    that one."""
    print(
        f"tailagent: warning: the one-file binary's launcher (PID {os.getppid()}) keeps "
        f"{', '.join(sorted(_kept))} in its environment, where a process of this user (an "
        "agent) may read them: give the tsnet key in tsnet.auth_key_file or the systemd "
        "credential, and settings in the config file",
        file=sys.stderr,
    )


def _not_dumpable() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_DUMPABLE, 0) failed: %s", os.strerror(ctypes.get_errno()))
