"""Making a worktree: its branch's name, the branch it starts from, its record and then
`git worktree add`.

The order is the point: the record is written before the worktree exists, so a crash in
between leaves a record (which discard and prune clear) and never an unmarked worktree
tailagent would then not dare to touch. Shared by a conversation's own worktree, one made
ahead and an idle conversation's waking, which differ in everything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tailagent.workspace.git import GitError, git
from tailagent.workspace.worktrees.fs import is_dir, unlink
from tailagent.workspace.worktrees.porcelain import unique
from tailagent.workspace.worktrees.probe import probe
from tailagent.workspace.worktrees.records import BRANCH_PREFIX, Records, Worktree, fresh
from tailagent.workspace.worktrees.repository import WorkspaceRepo


@dataclass
class Maker:
    """Makes worktrees of `repo` under the records' root; `base` is the branch they start
    from (None: the workspace's current branch when each is made)."""

    repo: WorkspaceRepo
    records: Records
    base: str | None

    async def base_branch(self, purpose: str) -> str:
        """The branch a new worktree starts from: `base`, or the workspace's current one."""
        if self.base is None:
            reason = await probe(self.repo.repo)
            if reason is not None:
                raise GitError(f"cannot give {purpose} a worktree: {reason}")
            head = await git(await self.repo.main(), "symbolic-ref", "-q", "--short", "HEAD")
            return head.out.strip()
        if not await self.repo.ref_exists(f"refs/heads/{self.base}"):
            raise GitError(
                f"the base branch {self.base} does not exist in {self.repo.repo}: "
                "create it or change workspace.base"
            )
        return self.base

    async def create(self, context_id: str, branch: str, base_branch: str) -> Worktree:
        worktree, record = await self.record_new(context_id, branch, base_branch)
        await self.check_out(worktree, record)
        return worktree

    async def record_new(
        self, context_id: str, branch: str, base_branch: str, slug: str | None = None
    ) -> tuple[Worktree, Path]:
        """A new worktree's record, written before the worktree exists (so a crash leaves
        a record, never an unmarked worktree); the record's path."""
        base_commit = await self.repo.tip(base_branch)
        root = self.records.root
        path = root.resolve() / (slug or self.records.slug(context_id))
        if path.exists():
            raise GitError(
                f"{path} exists but tailagent has no record of it: move it away to let "
                f"conversation {context_id} have a worktree"
            )
        worktree = fresh(context_id, path, branch, base_branch, base_commit)
        record = self.records.ready_record(path) if slug else self.records.record_path(context_id)
        await self.records.save(worktree, record)
        return worktree, record

    async def check_out(self, worktree: Worktree, record: Path, detach: bool = False) -> None:
        """`git worktree add`: on the worktree's new branch, or `detach`ed (one made ahead,
        whose branch is made when a conversation takes it)."""
        path = worktree.path
        on = ["--detach"] if detach else ["-b", worktree.branch]
        try:
            main = await self.repo.content(await self.repo.main())
            await git(main, "worktree", "add", "-q", *on, str(path), worktree.base_commit)
        except BaseException:
            # Git undoes a failed `worktree add`, but not one where only the person's
            # post-checkout hook failed: then the worktree is there, and the record stays
            # so that it is known as tailagent's (and discard or prune can remove it).
            if not is_dir(path):
                unlink(record)
            raise

    async def free_branch(self, context_id: str) -> str:
        """`tailagent/<first 8 characters>`, or a longer or numbered name when another
        branch has it already (context ids need not be random)."""
        clean = re.sub(r"[^A-Za-z0-9_-]", "-", context_id) or "conversation"
        candidates = [clean[:8], clean[:40]] + [f"{clean[:40]}-{n}" for n in range(2, 100)]
        for short in unique(candidates):
            branch = BRANCH_PREFIX + short
            if not await self.repo.ref_exists(f"refs/heads/{branch}"):
                return branch
        raise GitError(f"no free branch name for conversation {context_id}")
