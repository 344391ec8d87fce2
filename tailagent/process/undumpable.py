"""The first lines of ours any tailagent process runs: one whose environment may hold a
secret makes itself not dumpable before anything else.

A process started with `TS_AUTHKEY` (or a `TAILAGENT_*` setting holding a password) in
its environment has it in /proc/<pid>/environ and in its memory from the exec on, and
until it is not dumpable another process of its user (an agent still running from an
earlier server, anything that user runs) may read both, and its descriptors. Done in
`serve` after its imports, that was ~0.4 s of every start (docs/measured.md). Not
dumpable, by the kernel's ptrace access rules, only root may still read them. Python's
own start (the interpreter, site, the import of this package) comes before any code of
ours and stays a window (docs/security.md). `tailagent/__init__.py` imports this first,
so the console script, `python -m tailagent` and the one-file binary all run it before
any other module of ours. Standard library only, and the cheapest: it runs in every
process that imports tailagent.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterable

PR_SET_DUMPABLE = 4
ALWAYS = ("TS_AUTHKEY", "TAILAGENT_TOKEN")
# config.ENV_PREFIX, which is not imported for it: tailagent.config is not cheap. Every
# variable of this prefix counts here; secret_env.py tells settings from the rest later.
PREFIX = "TAILAGENT_"


def may_hold_a_secret(names: Iterable[str]) -> bool:
    """Whether any of the environment's names may be a secret's."""
    return any(name in ALWAYS or name.startswith(PREFIX) for name in names)


def not_dumpable() -> None:
    """No other process of this user may read this one's memory, environ or descriptors
    through /proc, nor ptrace it, from now until the next exec (which undoes it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        reason = os.strerror(ctypes.get_errno())
        print(f"tailagent: warning: prctl(PR_SET_DUMPABLE, 0) failed: {reason}", file=sys.stderr)


if may_hold_a_secret(os.environ):
    not_dumpable()
