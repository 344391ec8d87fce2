"""The worktree made ahead of the conversation that will take it, and its adoption.

A checkout takes 0.2 s to seconds on a big repository, which a new conversation would
otherwise wait for: one is made ahead (a repository of its own, detached, `+ready-<hex>`),
refreshed once its files' times are in the past, and given to the next new conversation,
moved to the base's tip and onto a branch of its own. It keeps its name (an agent may
have been started in it ahead, by that path, inside a fence bound to that path): the
conversation's own name, `<root>/<short id>`, is a link to it (Records.link). It is
nobody's until taken, so it lives only while a server serves its repository: a clean
stop removes it (`drop_all`), and a start removes what a killed server left
(`check_ready`). This changes for speed's reasons, not for merging's or a turn's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path

from tailagent.workspace.conversation_repos.lock import WorktreeLock
from tailagent.workspace.conversation_repos.making import Maker
from tailagent.workspace.conversation_repos.plumbing.fs import is_dir, is_file, text, unlink
from tailagent.workspace.conversation_repos.plumbing.gitdirs import forget
from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo
from tailagent.workspace.conversation_repos.records import (
    BRANCH_PREFIX,
    READY_PREFIX,
    Records,
    Worktree,
    fresh,
)
from tailagent.workspace.conversation_repos.removal import Removal
from tailagent.workspace.git import GitError, Repository, git

# The name the worktrees have always logged under, kept so log lines read as before.
log = logging.getLogger("tailagent.workspace.conversation_repos")

# git compares a file whose mtime is the index's own second by content, on every status:
# an index written just after a checkout makes each status read every file (~60 ms on
# 10,000 files against ~10). A worktree made ahead is refreshed once this much later.
RACY_SECONDS = 1.1


@dataclass
class MadeAhead:
    """The worktrees of `repo` made ahead, under the records' root."""

    repo: WorkspaceRepo
    records: Records
    lock: WorktreeLock
    maker: Maker
    removal: Removal
    # ConversationRepos made ahead and still being checked out: each future is done when it is.
    making: dict[Path, asyncio.Future[None]] = field(default_factory=dict, init=False)
    _refreshing: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    async def prepare(self) -> Path:
        """Makes a worktree ahead of the conversation that will take it (the next new
        one), so that conversation does not wait for a checkout; returns its path, where
        an agent may be started ahead too.

        The checkout runs outside the lock (it takes 0.2 s to seconds on a big repository
        and a busy disk, and turns ending meanwhile must not wait for it): until it is
        done the worktree is not offered. Its index is refreshed a moment later, so the
        first turns' `git status` need not read every file."""
        async with self.lock.exclusive():
            slug = READY_PREFIX + secrets.token_hex(6)
            base_branch = await self.maker.base_branch("the next conversation")
            worktree, record = await self.maker.record_new(
                "", BRANCH_PREFIX + slug, base_branch, slug
            )
            made = self.making[worktree.path] = asyncio.get_running_loop().create_future()
        try:
            await self.maker.check_out(worktree, record, detach=True)
        finally:
            del self.making[worktree.path]
            made.set_result(None)
        refresh = asyncio.create_task(self._refresh(worktree.path, record))
        self._refreshing.add(refresh)
        refresh.add_done_callback(self._refreshing.discard)
        return worktree.path

    async def _refresh(self, path: Path, record: Path) -> None:
        """Rewrites a new worktree's index once its files' times are in the past, so
        `git status` there compares times instead of reading every file."""
        await asyncio.sleep(RACY_SECONDS)
        async with self.lock.conversation(path.name):  # an adoption waits for it
            if is_file(record) and is_dir(path):  # not taken away meanwhile
                try:
                    own = await self.repo.conversation(path)
                    await git(own, "update-index", "-q", "--refresh", ok=(0, 1))
                except GitError as error:  # it is not given to anyone then (`adopt`)
                    log.warning("the worktree made ahead %s: %s", path, error)

    def ready(self) -> list[Path]:
        """The worktrees made ahead and not yet taken, oldest (next to be taken) first."""
        root = self.records.root
        if not root.is_dir():
            return []
        records = sorted(root.glob(READY_PREFIX + "*.json"), key=lambda r: r.stat().st_mtime_ns)
        paths = [root.resolve() / record.stem for record in records]
        return [path for path in paths if path not in self.making]

    async def adopt(self, context_id: str, base_branch: str) -> Worktree | None:
        """Gives the conversation the oldest worktree made ahead: moved to the base tip
        if the base went on meanwhile, its branch named for the conversation. One that
        is no longer clean or whole is removed and the next tried. Under the
        conversation's lock; the shared one is taken only to claim the worktree, and the
        git in it (where an agent may have been started ahead) runs after."""
        base_commit = await self.repo.tip(base_branch)
        while True:
            async with self.lock.exclusive():
                claimed = await self._claim(context_id, base_branch, base_commit)
            if claimed is None:
                return None
            async with self.lock.conversation(claimed.path.name):
                own = await self._usable(claimed, base_commit)
                if own is None:
                    continue
                # Made detached (no branch before it is anyone's): the conversation's
                # branch starts here, in its own repository, and HEAD moves onto it.
                await git(own, "update-ref", f"refs/heads/{claimed.branch}", base_commit)
                await git(own, "symbolic-ref", "HEAD", f"refs/heads/{claimed.branch}")
                await self.repo.show_base(own, base_branch, base_commit)
            adopted = replace(claimed, idle=False)
            await self.records.save(adopted)
            return adopted

    async def _claim(self, context_id: str, base_branch: str, base_commit: str) -> Worktree | None:
        """The oldest worktree made ahead, made the conversation's: its record becomes the
        conversation's (Records.claim: never two records naming it), with a free branch
        name, idle (a stop before its branch is made leaves a conversation its next turn
        wakes). None when there is none. Under the shared lock; no git on the worktree."""
        for path in self.ready():
            record = self.records.ready_record(path)
            try:
                ready = await self.records.read(record, "")
            except GitError as error:
                log.warning("a worktree made ahead (%s) is not usable: %s", path, error)
                continue
            if ready is None:
                continue
            branch = await self.maker.free_branch(context_id)
            made = fresh(context_id, path, branch, base_branch, base_commit)
            claimed = replace(made, idle=True, name=self.maker.free_name(context_id))
            await self.records.claim(claimed, record)
            self.records.link(claimed)  # after the record, which is what names it ours
            return claimed
        return None

    async def _usable(self, claimed: Worktree, base_commit: str) -> Repository | None:
        """git for the claimed worktree, brought to `base_commit`; None when it cannot be
        given (one no longer clean or whole is removed, with the record of its claim)."""
        path = claimed.path
        try:
            own = await self.repo.trusted(path) if is_dir(path) else None
            if own is not None and not await self.repo.uncommitted(own):
                if (await git(own, "rev-parse", "HEAD")).out.strip() != base_commit:
                    await git(own.slow(), "reset", "-q", "--hard", base_commit)
                return own
        except GitError as error:
            log.warning("a worktree made ahead (%s) is not usable: %s", path, error)
        await self.removal.remove(claimed)
        return None

    async def check_ready(self) -> None:
        """At a start, removes the worktrees made ahead that an earlier run left (a killed
        server's: a clean stop removes its own), so a repository never holds more than
        the one the running server makes. A claim cut short is finished (Records.settle);
        one whose path a conversation's record names is the rest of an older tailagent's
        adoption cut short: only its record goes. Under the lock."""
        claimed = set()
        for record in self.records.root.glob("*.json"):
            if not record.name.startswith(READY_PREFIX):
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                    claimed.add(json.loads(record.read_text())["path"])
        for path in self.ready():
            record = self.records.ready_record(path)
            try:
                if self.records.settle(record) or await self._drop_foreign(path, record):
                    continue
                ready = await self.records.read(record, "")
                if ready is None:
                    continue
                if str(path) in claimed:
                    record.unlink()
                else:
                    await self.removal.remove(ready, record)
            except GitError as error:
                log.warning("worktree made ahead %s left alone: %s", path, error)

    async def drop_all(self) -> int:
        """At a clean stop: removes the worktrees made ahead (nobody's yet; the next start
        makes one again). How many went. Under the lock."""
        dropped = 0
        for path in self.ready():
            record = self.records.ready_record(path)
            try:
                ready = await self.records.read(record, "")
                if ready is not None:
                    await self.removal.remove(ready, record)
                    dropped += 1
            except GitError as error:
                log.warning("worktree made ahead %s left alone: %s", path, error)
        return dropped

    async def _drop_foreign(self, path: Path, record: Path) -> bool:
        """Removes a worktree made ahead for another repository (the state dir served
        another --cwd before): it is nobody's, and would otherwise stay for good. True
        when the record was another repository's."""
        try:
            data = json.loads(text(record))
            repository = Path(data["repository"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if str(repository) == await self.repo.common_dir():
            return False
        if Path(data.get("path", "")) != path or path.parent != self.records.root.resolve():
            return False
        forget(repository, path)  # an older tailagent's: that repository's entry goes too
        if is_dir(path):
            await asyncio.to_thread(shutil.rmtree, path, ignore_errors=True)
        unlink(record)
        log.info("removed a worktree made ahead for the repository at %s, which this state "
                 "dir served before: %s is served now", repository, self.repo.repo)  # fmt: skip
        return True

    async def aclose(self) -> None:
        """Stops the index refreshes still waiting."""
        for refresh in list(self._refreshing):
            refresh.cancel()
            with contextlib.suppress(BaseException):
                await refresh
