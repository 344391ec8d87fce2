"""Conversations of an older tailagent, made repositories of their own at the first use.

Before each conversation had a repository of its own, its directory was a `git worktree`
of the base (a `.git` file naming `<base>/.git/worktrees/<name>`) on a branch
`tailagent/<short>` of the base: every conversation could read every other's commits. A
state dir from then is converted once per process, under the lock, before its first record
is opened (`Legacy.opening` is what Records runs then), so no concern meets an older
record by surprise and none has to ask for the conversion. Each such worktree keeps its
files and its uncommitted changes, and gets a `.git` directory of its own that borrows the
base's objects (its commits are in them already), holding its branch, its index and
whatever else git kept for that worktree alone (a rebase under way included); then git's
entry for it and its branch go from the base. One line is logged per conversion, and one
for each worktree left as it is, saying why.

The steps are ordered so that a stop at any point is finished or undone at the next try:
the `.git` file is moved aside into `<root>/.converting/<name>` first (and back if the
try fails), the record says `own_repository` once the new repository works, and only
then does the base lose the worktree's entry and branch.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from tailagent.workspace.conversation_repos.lock import WorktreeLock
from tailagent.workspace.conversation_repos.plumbing.fs import is_dir, is_real_dir, lexists
from tailagent.workspace.conversation_repos.plumbing.gitdirs import git_dir_of, links_to, stale
from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo
from tailagent.workspace.conversation_repos.records import Records, Worktree
from tailagent.workspace.git import GitError, git

log = logging.getLogger("tailagent.workspace.conversation_repos")

CONVERTING = ".converting"
# What git keeps for one linked worktree but that is not the new repository's: the link
# back, its lock and per-worktree config (whose extension the new repository lacks).
_NOT_COPIED = {"gitdir", "commondir", "locked", "config.worktree"}


@dataclass
class Legacy:
    """Converts the older tailagent's worktrees of `repo` that the records name."""

    repo: WorkspaceRepo
    records: Records
    lock: WorktreeLock
    done: bool = False

    async def opening(self) -> None:
        """What Records runs before a record is opened (Records.opening): the first time in
        this process, every older worktree converted, under the shared lock; in the task
        that holds it already when that is the one opening a record (a start's prune reads
        the records of worktrees made ahead under it)."""
        if self.done:
            return
        if self.lock.held_here():
            await self.convert_all()
            return
        async with self.lock.exclusive():
            await self.convert_all()

    async def convert_all(self) -> None:
        """Converts every older worktree the records name (once per process; under the
        lock), then forgets git's entries of worktrees under the root that are gone. The
        records are read as they are (Records.every), not opened: this is the opening."""
        if self.done:
            return
        for record, worktree in await self.records.every():
            try:
                if not worktree.own_repository:
                    await self.convert(worktree, record)
                elif lexists(self._aside(worktree)):
                    await self._finish(worktree)
            except (GitError, OSError) as error:
                log.warning("the worktree %s of an older tailagent is left as it is: %s",
                            worktree.path, error)  # fmt: skip
        common = Path(await self.repo.common_dir())
        for entry in stale(common, self.records.root.resolve()):
            shutil.rmtree(entry, ignore_errors=True)
        self.done = True

    async def convert(self, worktree: Worktree, record: Path) -> None:
        """Makes the worktree a repository of its own (see the module's docstring); a
        GitError or OSError says why it is left as it is."""
        path, aside = worktree.path, self._aside(worktree)
        if lexists(aside / "gitfile"):  # a try cut short: undone, then again
            if is_real_dir(path / ".git"):
                shutil.rmtree(path / ".git")
            os.replace(aside / "gitfile", path / ".git")
        if not is_dir(path):
            await self._without_directory(worktree, record)
            return
        common = Path(await self.repo.common_dir())
        entry = git_dir_of(common, path)
        if entry is None or not links_to(path, entry):
            raise GitError("its .git is not the file git wrote for it")
        head = (entry / "HEAD").read_text().strip()
        branch = f"refs/heads/{worktree.branch}"
        if head.startswith("ref: ") and head != f"ref: {branch}":
            raise GitError(f"it is on {head.removeprefix('ref: ')}, not its branch {branch}")
        tip = await self._tip(worktree.branch)
        if head == f"ref: {branch}" and tip is None:
            raise GitError(f"its branch {worktree.branch} is gone from {self.repo.repo}")
        aside.mkdir(parents=True, exist_ok=True)
        os.replace(path / ".git", aside / "gitfile")
        try:
            await self._own(worktree, entry, tip)
        except BaseException:
            shutil.rmtree(path / ".git", ignore_errors=True)
            os.replace(aside / "gitfile", path / ".git")
            raise
        await self.records.save(replace(worktree, own_repository=True), record)
        shutil.rmtree(entry, ignore_errors=True)  # what `git worktree prune` would
        await self._finish(worktree)
        moved = f" (its branch {worktree.branch} moved out of {self.repo.repo})" if tip else ""
        log.info("converted the worktree %s into a repository of its own%s", path, moved)

    def _aside(self, worktree: Worktree) -> Path:
        return self.records.root / CONVERTING / worktree.path.name

    async def _finish(self, worktree: Worktree) -> None:
        """The base's part of a conversion: the branch goes from the base (git's entry for
        the worktree went already, or goes as stale), then what was set aside."""
        tip = await self._tip(worktree.branch)
        if tip is not None:
            main = await self.repo.main()
            await git(main, "update-ref", "-d", f"refs/heads/{worktree.branch}", tip)
        shutil.rmtree(self._aside(worktree), ignore_errors=True)

    async def _own(self, worktree: Worktree, entry: Path, tip: str | None) -> None:
        """The new `.git`: a repository borrowing the base's objects, its branch at `tip`,
        the base branch as the base has it now (see WorkspaceRepo.show_base), and what git
        kept for the worktree alone copied over (index, HEAD, a rebase under way...)."""
        path, branch = worktree.path, worktree.branch
        await self.repo.init_conversation(path, branch)
        ignore = shutil.ignore_patterns(*_NOT_COPIED)
        shutil.copytree(entry, path / ".git", symlinks=True, ignore=ignore, dirs_exist_ok=True)
        own = await self.repo.conversation(path)
        if tip is not None:
            await git(own, "update-ref", f"refs/heads/{branch}", tip)
        base_tip = await self._tip(worktree.base_branch)
        if base_tip is not None:
            await self.repo.show_base(own, worktree.base_branch, base_tip)
        await self.repo.uncommitted(own)  # that git works there, with only its directory

    async def _without_directory(self, worktree: Worktree, record: Path) -> None:
        """A record whose worktree is not there: an idle conversation's (its branch went
        with its idling) becomes the new kind, its next turn makes a repository; one
        deleted by hand, whose branch still holds its commits, is left for the person."""
        if await self._tip(worktree.branch) is not None and not worktree.idle:
            raise GitError(
                f"its directory is gone but its branch {worktree.branch} is still in "
                f"{self.repo.repo}: `tailagent discard {worktree.context_id}` drops it"
            )
        await self.records.save(replace(worktree, own_repository=True), record)

    async def _tip(self, branch: str) -> str | None:
        try:
            return await self.repo.tip(branch)
        except GitError:
            return None
