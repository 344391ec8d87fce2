"""Ending conversations' directories (each with its repository): a discard a person asks
for (saying first what it loses), and the prune at each start of those whose
conversations no longer exist.

Only what a record names as tailagent's is touched; a record that does not add up, or
one of another repository, is left alone and said. Separate from removal.py (how one
worktree goes) because this decides which go and what a person is told.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from tailagent.statedir.files import write_private
from tailagent.workspace.conversation_repos.ahead import MadeAhead
from tailagent.workspace.conversation_repos.fates import Fates
from tailagent.workspace.conversation_repos.idle import Idle
from tailagent.workspace.conversation_repos.lock import WorktreeLock
from tailagent.workspace.conversation_repos.merge.quarantine import sweep as sweep_merges
from tailagent.workspace.conversation_repos.plumbing.fs import is_dir
from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo
from tailagent.workspace.conversation_repos.plumbing.specials import SpecialFile
from tailagent.workspace.conversation_repos.records import READY_PREFIX, Records, Worktree
from tailagent.workspace.conversation_repos.removal import Removal
from tailagent.workspace.git import GitError, git

# The name the worktrees have always logged under, kept so log lines read as before.
log = logging.getLogger("tailagent.workspace.conversation_repos")


@dataclass(frozen=True)
class DiscardResult:
    """What discarding a conversation loses (or lost): commits no other branch or tag
    holds ("<short sha> <subject>") and files changed but never committed."""

    commits_lost: list[str]
    files_uncommitted: list[str]
    commit_ids: list[str] = field(default_factory=list)  # the lost commits' full ids


@dataclass
class Cleanup:
    """Discards and prunes the conversations' worktrees of `repo`."""

    repo: WorkspaceRepo
    records: Records
    lock: WorktreeLock
    ahead: MadeAhead
    idle: Idle
    removal: Removal
    fates: Fates

    async def would_lose(self, context_id: str) -> DiscardResult:
        """What `discard` would lose, so it can be said before anything is removed."""
        worktree = await self.records.require(context_id, present=False)
        return await self._losses(worktree)

    async def _losses(self, worktree: Worktree) -> DiscardResult:
        """The commits on the conversation's branch that none of the base's branches, tags
        or remote-tracking branches holds, and the files not committed. Nothing is read
        from a directory whose `.git` plumbing/guard.py refuses (it is said, and lost all the same);
        for an older tailagent's worktree, from its branch in the base."""
        if not worktree.own_repository:
            return await self._legacy_losses(worktree)
        if not is_dir(worktree.path):
            return DiscardResult(commits_lost=[], files_uncommitted=[])
        own = await self.repo.trusted(worktree.path)
        if own is None:
            log.warning(
                "conversation %s: what its repository holds cannot be read (its .git was "
                "changed), so what a discard loses is not said",
                worktree.context_id,
            )
            return DiscardResult(commits_lost=[], files_uncommitted=[])
        logged: list[list[str]] = []
        head = await git(own, "rev-parse", "--verify", "-q", "HEAD^{commit}", ok=(0, 1))
        if head.code == 0:
            exclude = "".join(f"^{sha}\n" for sha in await self.repo.base_commits())
            result = await git(own, "log", "--format=%H %h %s", "--stdin", "--branches", "HEAD",
                               "--", input=exclude)  # fmt: skip
            logged = [line.split(" ", 1) for line in result.out.splitlines()]
        try:
            files = await self.repo.uncommitted(own)
        except SpecialFile as error:  # a discard is the way out of one: not refused
            log.warning("conversation %s: its uncommitted files are not said: %s",
                        worktree.context_id, error)  # fmt: skip
            files = []
        return DiscardResult(commits_lost=[said for _, said in logged], files_uncommitted=files,
                             commit_ids=[full for full, _ in logged])  # fmt: skip

    async def _legacy_losses(self, worktree: Worktree) -> DiscardResult:
        commits: list[str] = []
        if await self.repo.ref_exists(f"refs/heads/{worktree.branch}"):
            result = await git(
                await self.repo.main(),
                "log",
                "--format=%h %s",
                f"refs/heads/{worktree.branch}",
                "--not",
                f"--exclude={worktree.branch}",
                "--branches",
                "--tags",
                "--remotes",
                "--",
            )
            commits = result.out.splitlines()
        return DiscardResult(commits_lost=commits, files_uncommitted=[])

    async def discard(self, context_id: str) -> DiscardResult:
        """Removes the conversation's worktree, branch and record; returns what was lost.
        Also the way out for a worktree whose directory was deleted by hand. Under the
        conversation's lock only."""
        async with self.lock.conversation(self.records.slug(context_id)):
            worktree = await self.records.require(context_id, present=False)
            lost = await self._losses(worktree)
            await self.removal.remove(worktree)
            self.fates.remember(context_id, "discarded", lost.commit_ids)
            return lost

    async def prune(self, live: set[str]) -> list[str]:
        """Removes the worktrees, branches and records of tailagent's conversations not in
        `live` (those that no longer exist); returns their context ids. Only what a record
        names as tailagent's (`tailagent/` branch, worktree under `root`, this repository)
        is touched: a record that does not add up is left alone and logged."""
        pruned: list[str] = []
        root = self.records.root
        if not root.is_dir():
            return pruned
        self.removal.sweep()  # what a stop left in .trash
        async with self.lock.exclusive():
            sweep_merges(root)  # and of a merge cut short
            await self.ahead.check_ready()
            self.records.forget_merges(live)
            self.fates.forget(live)
            records = sorted(root.glob("*.json"))
        elsewhere: dict[str, int] = {}
        for record in records:
            if record.name.startswith(READY_PREFIX):
                continue
            # Each conversation under its own lock: its git (what a removal loses, an
            # idle one's shelving) holds up no other.
            async with self.lock.conversation(record.stem):
                try:
                    data = json.loads(record.read_text())
                    context_id = data["context_id"]
                    if not isinstance(context_id, str):
                        continue
                    if self.records.record_path(context_id) != record:
                        raise GitError(f"the record {record} does not match its name")
                    if data.get("repository") != await self.repo.common_dir():
                        if data.get("idle") is not True:  # an idle one holds nothing
                            repository = str(data.get("repository"))
                            elsewhere[repository] = elsewhere.get(repository, 0) + 1
                        continue
                    if context_id in live:
                        await self.idle.shelve(context_id)
                        continue
                    worktree = await self.records.require(context_id, present=False)
                    lost = await self._losses(worktree)
                    await self.removal.remove(worktree)
                except FileNotFoundError:
                    continue  # discarded meanwhile
                except (GitError, OSError, ValueError, KeyError, TypeError) as error:
                    log.warning("worktree record %s not pruned: %s", record, error)
                    continue
            if lost.commits_lost or lost.files_uncommitted:
                log.warning(
                    "pruned conversation %s's worktree, losing %d commits and %d uncommitted files",
                    context_id,
                    len(lost.commits_lost),
                    len(lost.files_uncommitted),
                )
            pruned.append(context_id)
        self._tell_elsewhere(elsewhere)
        return pruned

    def _tell_elsewhere(self, elsewhere: dict[str, int]) -> None:
        """Says which conversations with a branch here belong to another repository (the
        state dir served another --cwd before): once, not at every start, unless that
        changes (remembered in `<root>/.elsewhere`)."""
        lines = [
            f"{count} conversation{'s' if count > 1 else ''} of the repository at "
            f"{repository} (served before from this state dir): left alone "
            f"while {self.repo.repo} is served; serve that workspace (--cwd) to merge or "
            "discard them"
            for repository, count in sorted(elsewhere.items())
        ]
        mark = self.records.root / ".elsewhere"
        try:
            if mark.read_text() == "".join(f"{line}\n" for line in lines):
                return
        except OSError:
            pass
        for line in lines:
            log.info("%s", line)
        write_private(mark, "".join(f"{line}\n" for line in lines))
