"""Merging a conversation's branch back into its base, on request only.

The result is built before the base is touched: the conversation's branch is fetched into
a scratch repository (quarantine.py), the merged tree and commit are made there by the
base's own git (`git merge-tree`, `git commit-tree`), or by a rebase in the conversation's
own repository, and only then is the merged commit brought into the base's objects and the
base moved (base_checkout.py): a refusal or a conflict at any step leaves the base branch,
its working tree, its index and its objects as they were. This file holds the order of
those steps.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from tailagent.workspace.conversation_repos.fates import Fates
from tailagent.workspace.conversation_repos.lock import WorktreeLock
from tailagent.workspace.conversation_repos.merge.base_checkout import advance, base_checkout
from tailagent.workspace.conversation_repos.merge.commit import (
    STRATEGIES,
    Strategy,
    message,
    rebase,
)
from tailagent.workspace.conversation_repos.merge.quarantine import Scratch, scratch
from tailagent.workspace.conversation_repos.patches import Patch, between
from tailagent.workspace.conversation_repos.plumbing.errors import MergeConflict, MergeRefused
from tailagent.workspace.conversation_repos.plumbing.porcelain import listing, unique
from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo
from tailagent.workspace.conversation_repos.records import Records, Worktree
from tailagent.workspace.conversation_repos.removal import Removal
from tailagent.workspace.conversation_repos.turns import check_worktree
from tailagent.workspace.git import GitError, Repository, git

# The name the worktrees have always logged under, kept so log lines read as before.
log = logging.getLogger("tailagent.workspace.conversation_repos")


@dataclass(frozen=True)
class MergeResult:
    """A merge that happened: `commit` is the base branch's new tip."""

    commit: str
    strategy: Strategy
    base_branch: str
    removed: bool


@dataclass(frozen=True)
class MergePreview:
    """What a merge would bring, read before anything is merged: the branch's change
    since it left its base, and the tip it was read at (a merge told to expect that tip
    takes nothing else)."""

    branch: str
    base_branch: str
    tip: str
    commits: int
    patch: Patch


@dataclass
class Merging:
    """Merges the conversations' branches of `repo` into their bases."""

    repo: WorkspaceRepo
    records: Records
    lock: WorktreeLock
    removal: Removal
    fates: Fates

    async def preview(self, context_id: str) -> MergePreview:
        """What merging the conversation would bring into its base (the branch's change
        against the commit where it left the base, as `git diff base...branch`); the
        same MergeRefused a merge would meet when there is nothing it could merge: also
        when the base already has every change of the branch (a branch kept after its
        squash, `merge --keep`), which the base's tree merged with the branch's says."""
        worktree, own, base_tip, tip = await self._mergeable(context_id)
        with contextlib.suppress(MergeConflict):  # a conflict is the merge's to say
            merged = await self.merged_tree(worktree, base_tip, tip, own)
            base_tree = await git(own, "rev-parse", f"{base_tip}^{{tree}}")
            if merged == base_tree.out.strip():
                raise MergeRefused(
                    f"nothing to merge: {worktree.base_branch} already has every change "
                    f"on {worktree.branch}"
                )
        fork = (await git(own, "merge-base", base_tip, tip)).out.strip()
        commits = await git(own, "rev-list", "--count", f"{fork}..{tip}")
        patch = await between(own, fork, tip)
        return MergePreview(worktree.branch, worktree.base_branch, tip, int(commits.out), patch)

    async def merge(
        self,
        context_id: str,
        strategy: Strategy = "squash",
        keep: bool = False,
        expect: str | None = None,
    ) -> MergeResult:
        """Merges the conversation's branch into its base branch; then, unless `keep`,
        removes its worktree and branch.

        Refuses (MergeRefused, nothing changed) when there is nothing to merge, when the
        branch is no longer at the tip `expect` names (the one its preview showed), when
        the base is checked out in another worktree, or checked out in the workspace with
        changes to tracked files (never stashed, reset or overwritten); raises
        MergeConflict (nothing changed) when the branch conflicts with the base.

        Under the conversation's lock; the shared one is taken only to move the base
        (see _land), so no git on the conversation's files holds up another.
        """
        if strategy not in STRATEGIES:
            raise GitError(f"unknown merge strategy {strategy!r}: use squash, merge or rebase")
        async with self.lock.conversation(self.records.slug(context_id)):
            worktree, own, base_tip, tip = await self._mergeable(context_id)
            if expect is not None and tip != expect:
                raise MergeRefused(
                    f"{worktree.branch} changed since its change was shown (it was at "
                    f"{expect[:12]}, it is at {tip[:12]}): look at it again, then merge"
                )
            taken = await git(own, "rev-list", f"{base_tip}..{tip}")  # the turns it takes
            base = worktree.base_branch
            await base_checkout(self.repo, base)  # a dirty base refuses before the work
            try:
                new = await self._land(worktree, own, strategy, base_tip, tip)
            except MergeConflict:
                # What the agent is asked to rebase onto, in its own repository.
                await self.repo.show_base(own, base, base_tip)
                raise
            self.records.remember_merge(worktree, base, new, strategy)
            self.fates.remember(context_id, "merged", taken.out.split())
            removed = False
            if not keep:
                try:
                    await self.removal.remove(worktree)
                    removed = True
                except (GitError, OSError) as error:
                    log.warning(
                        "merged conversation %s but kept its worktree: %s", context_id, error
                    )
            return MergeResult(commit=new, strategy=strategy, base_branch=base, removed=removed)

    async def _land(
        self,
        worktree: Worktree,
        own: Repository,
        strategy: Strategy,
        base_tip: str,
        tip: str,
    ) -> str:
        """Builds the merged commit in a scratch repository, brings it into the base and
        moves the base branch there; the commit. Nothing of the base changes on the way
        to a refusal or a conflict. The build (git on the conversation's files) runs under
        the conversation's lock alone; the move under the shared one too, and only from
        the base tip the build started at."""
        base = worktree.base_branch
        async with scratch(self.repo, self.records.root) as made:
            if await made.take(own, worktree.branch) != tip:
                raise MergeRefused(f"{worktree.branch} moved while merging: merge again")
            merged = await self.merged_tree(worktree, base_tip, tip, made.base)
            base_tree = await git(made.base, "rev-parse", f"{base_tip}^{{tree}}")
            if strategy == "squash" and merged == base_tree.out.strip():
                raise MergeRefused(
                    f"nothing to merge: {base} already has every change on {worktree.branch}"
                )
            try:
                new = await self._new_commit(worktree, own, strategy, merged, base_tip, tip, made)
                async with self.lock.exclusive():
                    checkout = await base_checkout(self.repo, base)
                    if await self.repo.tip(base) != base_tip:
                        raise MergeRefused(f"{base} moved while merging: merge again")
                    await made.deliver(new, await self.repo.main())
                    await advance(self.repo, worktree, checkout, base_tip, new, strategy)
            except BaseException:
                if strategy == "rebase":
                    # Put the conversation's branch back where it was (its worktree was
                    # clean, so nothing else is there to lose; a rebase that failed
                    # aborted itself, and left it there).
                    await git(own.slow(), "reset", "-q", "--hard", tip)
                raise
        return new

    async def _mergeable(self, context_id: str) -> tuple[Worktree, Repository, str, str]:
        """The conversation's worktree, git for it, its base's tip and its branch's tip,
        once it is known to have something to merge; MergeRefused if it has not."""
        worktree = await self.records.require(context_id)
        if worktree.idle:
            raise MergeRefused(
                f"nothing to merge: conversation {context_id} has changed nothing "
                f"(its branch {worktree.branch} is made again at its next turn)"
            )
        own = await self.repo.conversation(worktree.path)
        await check_worktree(worktree, own)
        pending = await self.repo.uncommitted(own)
        if pending:
            raise MergeRefused(
                f"conversation {context_id}'s worktree has changes not committed yet "
                f"({listing(pending)}): send the agent another turn (its changes are "
                "committed when it ends), then merge again"
            )
        base = worktree.base_branch
        base_tip = await self.repo.tip(base)
        tip = await self.repo.tip(worktree.branch, own)
        ahead = await git(own, "rev-list", "--count", f"{base_tip}..{tip}")
        if int(ahead.out) == 0:
            raise MergeRefused(
                f"nothing to merge: {worktree.branch} has no commits that {base} lacks"
            )
        return worktree, own, base_tip, tip

    async def merged_tree(
        self, worktree: Worktree, base_tip: str, tip: str, base: Repository
    ) -> str:
        """The tree of base + branch, written to the object store of `base` (the base's
        git, writing to a merge's scratch repository) only: no checkout or index is
        touched; MergeConflict when they conflict."""
        result = await git(
            (await self.repo.content(base)).slow(),
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
        own: Repository,
        strategy: Strategy,
        merged: str,
        base_tip: str,
        tip: str,
        made: Scratch,
    ) -> str:
        """The commit the base is to move to: the branch rebased onto the base (in the
        conversation's repository, then taken into the scratch one), or a commit of the
        merged tree (a squash on the base alone, a merge on both)."""
        identity = await self.repo.identity()
        if strategy == "rebase":
            new = await rebase(worktree, own, base_tip, tip, identity)
            if await made.take(own, worktree.branch) != new:
                raise MergeRefused(f"{worktree.branch} moved while merging: merge again")
            return new
        text = await message(made.base, worktree, strategy, base_tip, tip)
        parents = ["-p", base_tip] + (["-p", tip] if strategy == "merge" else [])
        commit = await git(
            made.base, *identity, "commit-tree", merged, *parents, "-F", "-", input=text
        )
        return commit.out.strip()
