"""The worktrees' lock: one change at a time to a repository's conversations.

Within one process an asyncio lock is enough, but the server and a `tailagent merge` run
beside it share the state dir: without an advisory lock on `<root>/.lock` the two could
merge one branch twice or commit a turn into a branch being rebased. Every collaborator
that changes anything takes this one lock, handed to it by the facade.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

from tailagent.workspace.git import GitError
from tailagent.workspace.worktrees.repos.fs import make_root

LOCK_WAIT = 60.0  # seconds another process may hold the worktrees' lock (a long rebase)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class WorktreeLock:
    """The lock on the worktrees under `root` (`<state dir>/worktrees`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = asyncio.Lock()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """One change at a time to this repository's conversations: within this process
        (an asyncio lock) and across processes sharing the state dir, such as the server
        and a `tailagent merge` run beside it (an advisory lock on `<root>/.lock`)."""
        async with self._lock:
            make_root(self.root)
            fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                deadline = time.monotonic() + LOCK_WAIT
                while not _try_lock(fd):
                    if time.monotonic() > deadline:
                        raise GitError(
                            f"another tailagent process is changing the worktrees in "
                            f"{self.root}: try again when it is done"
                        )
                    await asyncio.sleep(0.05)
                yield
            finally:
                os.close(fd)  # closing drops the lock
