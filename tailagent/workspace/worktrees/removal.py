"""Taking one worktree, its branch and its record away, and deleting retired worktrees'
files in the background.

Every way out goes through here (a merge, a discard, a prune, a worktree made ahead that
is no longer usable), so the order that keeps a crash recoverable (worktree, branch, then
the record last) and the background sweep of `<root>/.trash` are written once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tailagent.workspace.git import GitError, git
from tailagent.workspace.worktrees.fs import is_dir
from tailagent.workspace.worktrees.gitdirs import links_to, relink
from tailagent.workspace.worktrees.records import Records, Worktree
from tailagent.workspace.worktrees.repository import WorkspaceRepo

# The name the worktrees have always logged under, kept so log lines read as before.
log = logging.getLogger("tailagent.workspace.worktrees")

# Retired worktrees wait in `.trash` for removal (`.` starts no context id as a file name).
TRASH = ".trash"


@dataclass
class Removal:
    """Removes worktrees of `repo` that the records name."""

    repo: WorkspaceRepo
    records: Records
    _sweeper: asyncio.Task[None] | None = field(default=None, init=False)

    async def remove(self, worktree: Worktree, record: Path | None = None) -> None:
        """Removes exactly this worktree (by its path), its branch and then its record,
        the record last so an interrupted removal can be finished by discard or prune."""
        registered = {c.path.resolve() for c in await self.repo.checkouts()}
        if worktree.path.resolve() in registered:
            await self.retire(worktree.path)
        elif worktree.path.exists():
            raise GitError(
                f"{worktree.path} is not a git worktree of {self.repo.repo}: left alone; "
                "remove it by hand if it is not needed"
            )
        if await self.repo.ref_exists(f"refs/heads/{worktree.branch}"):
            await git(await self.repo.main(), "branch", "-D", worktree.branch)
        (record or self.records.record_path(worktree.context_id)).unlink(missing_ok=True)

    async def retire(self, path: Path) -> None:
        """Takes a worktree out of use at once: moved into `<root>/.trash` and detached
        from its branch (which can then go). Deleting its files, most of a second for
        10,000, happens in the background and outside the lock, so the next conversation
        does not wait behind it; what a crash leaves in `.trash` is swept at the next start.
        """
        trash = self.records.root / TRASH
        trash.mkdir(exist_ok=True, mode=0o700)
        target = trash / f"{path.name}-{secrets.token_hex(3)}"
        git_dir = await self.repo.git_dir(path)
        if is_dir(path) and not links_to(path, git_dir):
            relink(path, git_dir)
        main = await self.repo.main()
        moved = await git(main, "worktree", "move", str(path), str(target), ok=(0, 128))
        if moved.code != 0:  # git does not move a worktree holding submodules
            await git(main, "worktree", "remove", "--force", str(path))
            return
        retired = main.linked(git_dir, target)
        head = await git(retired, "rev-parse", "HEAD")
        await git(retired, "update-ref", "--no-deref", "HEAD", head.out.strip())
        self.sweep()

    def sweep(self) -> None:
        """Deletes retired worktrees (`<root>/.trash`) in the background."""
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep(), name="worktree sweeper")

    async def _sweep(self) -> None:
        trash = self.records.root / TRASH
        tried: set[Path] = set()
        while trash.is_dir() and (waiting := sorted(set(trash.iterdir()) - tried)):
            for item in waiting:
                tried.add(item)
                try:
                    main = await self.repo.main()
                    await git(main, "worktree", "remove", "--force", str(item), ok=(0, 128))
                except GitError as error:
                    log.warning("could not remove the retired worktree %s: %s", item, error)
                if item.exists():  # no longer (or never) registered with git
                    await asyncio.to_thread(shutil.rmtree, item, ignore_errors=True)

    async def aclose(self) -> None:
        """Waits for retired worktrees to be deleted (a stop mid-way is finished later)."""
        if self._sweeper is not None:
            with contextlib.suppress(Exception):
                await self._sweeper
