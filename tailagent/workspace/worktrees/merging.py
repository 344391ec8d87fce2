"""Merging a conversation's branch back into its base, on request only.

The result is built in git's object store first (`git merge-tree`, `git commit-tree`, or
a rebase in the conversation's own worktree), and only then is the base moved
(base_checkout.py): a refusal or a conflict at any step leaves the base branch, its
working tree and its index as they were. This file holds the order of those steps.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tailagent.workspace.git import GitError, Repository, git
from tailagent.workspace.worktrees.base_checkout import advance, base_checkout
from tailagent.workspace.worktrees.errors import MergeConflict, MergeRefused
from tailagent.workspace.worktrees.lock import WorktreeLock
from tailagent.workspace.worktrees.merge_commit import STRATEGIES, Strategy, message, rebase
from tailagent.workspace.worktrees.porcelain import listing, unique
from tailagent.workspace.worktrees.records import Records, Worktree
from tailagent.workspace.worktrees.removal import Removal
from tailagent.workspace.worktrees.repository import WorkspaceRepo
from tailagent.workspace.worktrees.turns import check_worktree

# The name the worktrees have always logged under, kept so log lines read as before.
log = logging.getLogger("tailagent.workspace.worktrees")


@dataclass(frozen=True)
class MergeResult:
    """A merge that happened: `commit` is the base branch's new tip."""

    commit: str
    strategy: Strategy
    base_branch: str
    removed: bool


@dataclass
class Merging:
    """Merges the conversations' branches of `repo` into their bases."""

    repo: WorkspaceRepo
    records: Records
    lock: WorktreeLock
    removal: Removal

    async def merge(
        self, context_id: str, strategy: Strategy = "squash", keep: bool = False
    ) -> MergeResult:
        """Merges the conversation's branch into its base branch; then, unless `keep`,
        removes its worktree and branch.

        Refuses (MergeRefused, nothing changed) when there is nothing to merge, when the
        base is checked out in another worktree, or checked out in the workspace with
        changes to tracked files (never stashed, reset or overwritten); raises
        MergeConflict (nothing changed) when the branch conflicts with the base.
        """
        if strategy not in STRATEGIES:
            raise GitError(f"unknown merge strategy {strategy!r}: use squash, merge or rebase")
        async with self.lock.exclusive():
            worktree, linked, base_tip, tip = await self._mergeable(context_id)
            base = worktree.base_branch
            checkout = await base_checkout(self.repo, base)
            merged = await self.merged_tree(worktree, base_tip, tip)
            base_tree = await git(await self.repo.main(), "rev-parse", f"{base_tip}^{{tree}}")
            if strategy == "squash" and merged == base_tree.out.strip():
                raise MergeRefused(
                    f"nothing to merge: {base} already has every change on {worktree.branch}"
                )
            new = await self._new_commit(worktree, linked, strategy, merged, base_tip, tip)
            try:
                await advance(self.repo, worktree, checkout, base_tip, new, strategy)
            except BaseException:
                if strategy == "rebase":
                    # Put the conversation's branch back where it was (its worktree was
                    # clean, so nothing else is there to lose).
                    await git(linked, "reset", "-q", "--hard", tip)
                raise
            self.records.remember_merge(worktree, base, new, strategy)
            removed = False
            if not keep:
                try:
                    await self.removal.remove(worktree)
                    removed = True
                except GitError as error:
                    log.warning(
                        "merged conversation %s but kept its worktree: %s", context_id, error
                    )
            return MergeResult(commit=new, strategy=strategy, base_branch=base, removed=removed)

    async def _mergeable(self, context_id: str) -> tuple[Worktree, Repository, str, str]:
        """The conversation's worktree, git for it, its base's tip and its branch's tip,
        once it is known to have something to merge; MergeRefused if it has not."""
        worktree = await self.records.require(context_id)
        if worktree.idle:
            raise MergeRefused(
                f"nothing to merge: conversation {context_id} has changed nothing "
                f"(its branch {worktree.branch} is made again at its next turn)"
            )
        linked = await self.repo.linked(worktree.path)
        await check_worktree(worktree, linked)
        pending = await self.repo.uncommitted(linked)
        if pending:
            raise MergeRefused(
                f"conversation {context_id}'s worktree has changes not committed yet "
                f"({listing(pending)}): send the agent another turn (its changes are "
                "committed when it ends), then merge again"
            )
        base = worktree.base_branch
        base_tip = await self.repo.tip(base)
        tip = await self.repo.tip(worktree.branch)
        ahead = await git(await self.repo.main(), "rev-list", "--count", f"{base_tip}..{tip}")
        if int(ahead.out) == 0:
            raise MergeRefused(
                f"nothing to merge: {worktree.branch} has no commits that {base} lacks"
            )
        return worktree, linked, base_tip, tip

    async def merged_tree(self, worktree: Worktree, base_tip: str, tip: str) -> str:
        """The tree of base + branch, written to the object store only (no checkout or
        index is touched); MergeConflict when they conflict."""
        result = await git(
            await self.repo.content(await self.repo.main()),
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            "-z",
            base_tip,
            tip,
            ok=(0, 1),
        )
        items = result.out.split("\0")
        if result.code == 0:
            return items[0].strip()
        paths = unique([p for p in items[1:] if p])
        raise MergeConflict.between(worktree.branch, worktree.base_branch, paths)

    async def _new_commit(
        self,
        worktree: Worktree,
        linked: Repository,
        strategy: Strategy,
        merged: str,
        base_tip: str,
        tip: str,
    ) -> str:
        """The commit the base is to move to: the branch rebased onto the base, or a
        commit of the merged tree (a squash on the base alone, a merge on both)."""
        identity = await self.repo.identity()
        if strategy == "rebase":
            return await rebase(worktree, linked, base_tip, tip, identity)
        main = await self.repo.main()
        text = await message(main, worktree, strategy, base_tip, tip)
        parents = ["-p", base_tip] + (["-p", tip] if strategy == "merge" else [])
        made = await git(main, *identity, "commit-tree", merged, *parents, "-F", "-", input=text)
        return made.out.strip()
