"""Taking one conversation's directory and its record away, and deleting retired
directories' files in the background.

Every way out goes through here (a merge, a discard, a prune, a directory made ahead that
is no longer usable), so the order that keeps a crash recoverable (the directory, then the
record last) and the background sweep of `<root>/.trash` are written once. A conversation's
branch, commits and objects live in its directory's own repository, so they go with it: the
base repository is not touched, but for what an older tailagent's worktree left there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tailagent.workspace.conversation_repos.plumbing.fs import lexists
from tailagent.workspace.conversation_repos.plumbing.gitdirs import forget
from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo
from tailagent.workspace.conversation_repos.records import Records, Worktree
from tailagent.workspace.git import git

# The name the worktrees have always logged under, kept so log lines read as before.
log = logging.getLogger("tailagent.workspace.conversation_repos")

# Retired directories wait in `.trash` for removal (`.` starts no context id as a file name).
TRASH = ".trash"


@dataclass
class Removal:
    """Removes the conversations' directories the records name."""

    repo: WorkspaceRepo
    records: Records
    _sweeper: asyncio.Task[None] | None = field(default=None, init=False)

    async def remove(self, worktree: Worktree, record: Path | None = None) -> None:
        """Removes exactly this conversation's directory (by its path, its repository with
        it) and then its record, the record last so an interrupted removal can be finished
        by discard or prune. A record of an older tailagent takes its worktree's entry and
        branch out of the base too (see conversation_repos/legacy.py)."""
        if lexists(worktree.path):
            self.retire(worktree.path)
        self.records.unlink(worktree)  # the link a person finds it by, if it has one
        if not worktree.own_repository:
            await self.forget_legacy(worktree)
        (record or self.records.record_path(worktree.context_id)).unlink(missing_ok=True)

    async def forget_legacy(self, worktree: Worktree) -> None:
        """What an older tailagent's worktree kept in the base: git's entry for it and its
        branch (the record says both are tailagent's)."""
        forget(Path(await self.repo.common_dir()), worktree.path)
        if await self.repo.ref_exists(f"refs/heads/{worktree.branch}"):
            await git(await self.repo.main(), "update-ref", "-d", f"refs/heads/{worktree.branch}")

    def retire(self, path: Path) -> None:
        """Takes a directory out of use at once: moved into `<root>/.trash`. Deleting its
        files, most of a second for 10,000, happens in the background and outside the
        lock, so the next conversation does not wait behind it; what a crash leaves in
        `.trash` is swept at the next start."""
        trash = self.records.root / TRASH
        trash.mkdir(exist_ok=True, mode=0o700)
        os.rename(path, trash / f"{path.name}-{secrets.token_hex(3)}")
        self.sweep()

    def sweep(self) -> None:
        """Deletes retired directories (`<root>/.trash`) in the background."""
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep(), name="worktree sweeper")

    async def _sweep(self) -> None:
        trash = self.records.root / TRASH
        tried: set[Path] = set()
        while trash.is_dir() and (waiting := sorted(set(trash.iterdir()) - tried)):
            for item in waiting:
                tried.add(item)
                if item.is_symlink() or not item.is_dir():
                    item.unlink(missing_ok=True)
                    continue
                await asyncio.to_thread(shutil.rmtree, item, ignore_errors=True)
                if item.exists():
                    log.warning("could not remove the retired worktree %s", item)

    async def aclose(self) -> None:
        """Waits for retired directories to be deleted (a stop mid-way is finished later)."""
        if self._sweeper is not None:
            with contextlib.suppress(Exception):
                await self._sweeper
