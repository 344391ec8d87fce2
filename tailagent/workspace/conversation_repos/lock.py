"""The worktrees' locks: one change at a time to a conversation, and to what they share.

Within one process asyncio locks are enough, but the server and a `tailagent merge` run
beside it share the state dir: without advisory locks on files there the two could merge
one branch twice or commit a turn into a branch being rebased.

A conversation's own repository is its agent's to fill, and tailagent's git there can be
slow or stuck (a FIFO, a file of gigabytes: git.py's deadline ends it). So the work on one
conversation's repository (its turn's commit, its merge's rebase, its discard) holds that
conversation's lock only (`conversation`, on `<root>/.locks/<name>`), and another
conversation never waits for it. The lock they share (`exclusive`, on `<root>/.lock`) is
held only for what is truly shared, and never while git runs on an agent's files: the
choice of a branch name and the record that keeps it, the worktree made ahead and its
claim, the base branch's move at a merge, and the prune at a start. Where both are held,
a conversation's is taken first.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tailagent.workspace.conversation_repos.plumbing.fs import make_root
from tailagent.workspace.git import GitError

LOCK_WAIT = 60.0  # seconds another process may hold a lock here (a long rebase)
LOCKS = ".locks"  # the conversations' lock files (`.` starts no context id as a file name)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class WorktreeLock:
    """The locks on the worktrees under `root` (`<state dir>/worktrees`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = asyncio.Lock()
        self._holder: asyncio.Task[Any] | None = None  # the task holding `exclusive`
        # A conversation's lock lives while someone holds or waits for it.
        self._ones: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """One change at a time to what the conversations share (see the module's
        docstring), within this process and across processes sharing the state dir."""
        async with self._held(
            self._lock, self.root / ".lock", f"changing the worktrees in {self.root}"
        ):
            self._holder = asyncio.current_task()
            try:
                yield
            finally:
                self._holder = None

    def held_here(self) -> bool:
        """Whether the running task holds `exclusive`: work that needs it (the records'
        opening, legacy.py) then runs in it, instead of waiting for the task itself."""
        return self._holder is not None and self._holder is asyncio.current_task()

    def conversation(self, name: str) -> contextlib.AbstractAsyncContextManager[None]:
        """One change at a time to one conversation's directory: `name` is its record's
        slug (Records.slug), or the name of a worktree made ahead."""
        lock = self._ones.get(name)
        if lock is None:
            lock = self._ones[name] = asyncio.Lock()
        path = self.root / LOCKS / name
        return self._held(lock, path, f"changing the conversation's worktree {self.root / name}")

    @contextlib.asynccontextmanager
    async def _held(self, lock: asyncio.Lock, path: Path, doing: str) -> AsyncIterator[None]:
        async with lock:
            make_root(path.parent)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                deadline = time.monotonic() + LOCK_WAIT
                while not _try_lock(fd):
                    if time.monotonic() > deadline:
                        raise GitError(
                            f"another tailagent process is {doing}: try again when it is done"
                        )
                    await asyncio.sleep(0.05)
                yield
            finally:
                os.close(fd)  # closing drops the lock
