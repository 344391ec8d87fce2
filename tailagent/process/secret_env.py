"""The server's own secrets, kept out of its environment block and out of its children's.

An agent runs as the server's user, and `/proc/<server pid>/environ` showed it what the
server was started with: `TS_AUTHKEY`, a database password in `TAILAGENT_STORE`. That
file is what lies now in the pages where the kernel laid the environment out at exec;
unsetenv and putenv only change the pointers to it (`environ`), not those bytes. So
`tailagent serve` takes the secrets out of `os.environ` (which unsets them) and then
overwrites their entries in those pages with zeros: from then on /proc/<pid>/environ
shows neither them nor their names, to anyone, root included; the rest of it is as it
was. Done in place, with no exec: the pid stays the one systemd's Type=notify and
watchdog go by, and no second image starts Python again, dumpable (an exec undoes
PR_SET_DUMPABLE), with the secrets handed to it. They live only here: not in
`os.environ`, so no process the server starts (an agent, a terminal, git, a hook) is
handed them. The config reader and the tsnet key lookup read `environ()`.

The secrets: `TS_AUTHKEY`, `TAILAGENT_TOKEN`, and every `TAILAGENT_<KEY>` that is a
setting (the settings are where a password, a token or an MCP server's headers go).

The one-file binary cannot do all of it: its launcher, the parent that unpacked it,
keeps its own environment block, and that is only warned of.

Not dumpable (undumpable.py, done at the package's import when the environment may
hold a secret, and here again for the secrets of a config file): no other process of
its user, an agent included, may read its memory, environ or descriptors through /proc
or ptrace it. Root still may: an agent running as root reads anything of the server's.
"""

from __future__ import annotations

import ctypes
import os
import sys

from tailagent.config import ENV_PREFIX
from tailagent.config.sources import PARSERS, _env_name
from tailagent.process.undumpable import ALWAYS, not_dumpable

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
    """First thing in `tailagent serve`: takes the secrets out of the environment and
    out of /proc/<pid>/environ, and makes the process not dumpable."""
    not_dumpable()
    if names := secret_names(dict(os.environ)):
        _kept.update({name: os.environ.pop(name) for name in names})
        _scrub(names)
        if getattr(sys, "frozen", False):
            _warn_of_the_launcher()


def _scrub(names: list[str]) -> None:
    """Zeros every entry of the block the kernel laid out at exec that names one of
    `names`: its bounds are env_start and env_end in /proc/self/stat (fields 50, 51)."""
    wanted = {name.encode() for name in names}
    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except OSError as exc:
        print(
            f"tailagent: warning: could not take {', '.join(names)} out of this process's "
            f"environ ({exc.strerror}); root may read them in /proc",
            file=sys.stderr,
        )
        return
    start, end = int(fields[47]), int(fields[48])
    offset = start
    for entry in ctypes.string_at(start, end - start).split(b"\0"):
        if entry.split(b"=", 1)[0] in wanted:
            ctypes.memset(offset, 0, len(entry))
        offset += len(entry) + 1


def _warn_of_the_launcher() -> None:
    """The one-file binary runs this interpreter as a child of its launcher, which
    waits for it and keeps the environment it was started with: nothing done here
    clears that one."""
    print(
        f"tailagent: warning: the one-file binary's launcher (PID {os.getppid()}) keeps "
        f"{', '.join(sorted(_kept))} in its environment, where a process of this user (an "
        "agent) may read them: give the tsnet key in tsnet.auth_key_file or the systemd "
        "credential, and settings in the config file",
        file=sys.stderr,
    )
