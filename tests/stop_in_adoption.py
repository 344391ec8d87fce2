"""`tailagent serve`, stopped dead (as a kill would stop it) at one write point of a
conversation's adoption of a worktree made ahead: `python -P stop_in_adoption.py N
serve ...` stops just before its Nth point, or runs on when the adoption has fewer.

Test code only, run as a server's command by tests/test_adoption_stops.py: it wraps
the real functions in this process, then runs the real CLI. The points are each write
an adoption does (its records, their rename or removal, the git it runs in the directory) and
its end; each passed is said on stderr (the server's log)."""

from __future__ import annotations

import contextvars
import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tailagent.cli import run
from tailagent.workspace.conversation_repos import ahead, records
from tailagent.workspace.conversation_repos.ahead import MadeAhead
from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo

STOP_AT = int(sys.argv.pop(1))
ADOPTING: contextvars.ContextVar[bool] = contextvars.ContextVar("adopting", default=False)
passed = 0


def point(what: str) -> None:
    """One write point of the adoption under way (none outside one)."""
    global passed
    if not ADOPTING.get():
        return
    passed += 1
    if passed == STOP_AT:
        print(f"stop-in-adoption: stopped before point {passed} ({what})", file=sys.stderr)
        sys.stderr.flush()
        os._exit(137)
    print(f"stop-in-adoption: point {passed} ({what})", file=sys.stderr)


def before(what: Callable[..., str], real: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(real)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        point(what(*args))
        return real(*args, **kwargs)

    return wrapped


real_adopt = MadeAhead.adopt


async def adopt(self: MadeAhead, *args: Any) -> Any:
    ADOPTING.set(True)  # this task's context only: not the worktree made ahead next
    adopted = await real_adopt(self, *args)
    point("the adoption's end")
    ADOPTING.set(False)
    return adopted


MadeAhead.adopt = adopt  # type: ignore[method-assign]
records.write_private = before(lambda path, _: f"write {path.name}", records.write_private)
os.rename = before(lambda src, dst: f"rename {src.name} to {dst.name}", os.rename)
Path.unlink = before(lambda path, *_: f"remove {path.name}", Path.unlink)  # type: ignore[method-assign]
ahead.git = before(lambda _, *args, **__: f"git {args[0]}", ahead.git)
WorkspaceRepo.show_base = before(  # type: ignore[method-assign]
    lambda *_: "show the base in the conversation's repository", WorkspaceRepo.show_base
)
sys.exit(run())
