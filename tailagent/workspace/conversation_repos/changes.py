"""What a conversation changed, for people to read: where its branch stands against its
base (status) and the whole of it as a patch (diff). Read-only, so it takes no lock and
changes only when what is shown changes. Read from the conversation's own repository,
which holds its branch and reads the base's commits through its alternates."""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from tailagent.workspace.conversation_repos.patches import Patch, between
from tailagent.workspace.conversation_repos.plumbing.porcelain import split_z
from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo
from tailagent.workspace.conversation_repos.records import Records
from tailagent.workspace.git import PLAIN_DIFF, GitError, git

_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


@dataclass(frozen=True)
class WorktreeStatus:
    """Where a conversation's branch stands against its base branch's current tip."""

    branch: str
    base_branch: str
    ahead: int
    behind: int
    files: list[str]
    tip: str = ""  # the branch's commit ("" for an idle conversation's, which has none)


@dataclass
class Changes:
    """The changes of the conversations of `repo`."""

    repo: WorkspaceRepo
    records: Records

    async def status(self, context_id: str) -> WorktreeStatus:
        """Commits ahead of and behind the base branch's current tip, and the files changed
        on the branch since it left the base plus those changed but not yet committed."""
        worktree = await self.records.require(context_id)
        if worktree.idle:
            return WorktreeStatus(worktree.branch, worktree.base_branch, 0, 0, [])
        own = await self.repo.conversation(worktree.path)
        base_tip = await self.repo.tip(worktree.base_branch)
        tip = await self.repo.tip(worktree.branch, own)
        counts = await git(own, "rev-list", "--left-right", "--count", f"{tip}...{base_tip}")
        ahead, behind = (int(n) for n in counts.out.split())
        merge_base = await git(own, "merge-base", base_tip, tip)
        changed = await git(
            own, "diff", "--name-only", "-z", "--no-renames", merge_base.out.strip(), tip
        )
        files = split_z(changed.out) + await self.repo.uncommitted(own)
        return WorktreeStatus(
            branch=worktree.branch,
            base_branch=worktree.base_branch,
            ahead=ahead,
            behind=behind,
            files=sorted(set(files)),
            tip=tip,
        )

    async def diff(self, context_id: str) -> str:
        """The whole conversation as a patch against where it left its base, followed,
        under a line of its own, by what is changed in the worktree but not committed.

        The uncommitted part is built in a throwaway index (in the state dir, not the
        agent's `.git`), so the worktree's own index (which the agent may be using) is
        left as it is. No diff driver of a config runs
        (`--no-ext-diff`, `--no-textconv`): the agent's `.gitattributes` could pick one.
        """
        worktree = await self.records.require(context_id)
        if worktree.idle:
            return ""
        own = await self.repo.conversation(worktree.path)
        tip = await self.repo.tip(worktree.branch, own)
        base_tip = await self.repo.tip(worktree.base_branch)
        merge_base = (await git(own, "merge-base", base_tip, tip)).out.strip()
        options = (*PLAIN_DIFF, "--binary")
        committed = await git(own, "diff", *options, merge_base, tip)
        text = committed.out
        if await self.repo.uncommitted(own):
            index = self.records.root / f".diff-index-{secrets.token_hex(4)}"
            env = {"GIT_INDEX_FILE": str(index)}
            try:
                await git(own, "read-tree", "HEAD", env=env)
                await git(own, "add", "-A", env=env)
                pending = await git(own, "diff", *options, "--cached", "HEAD", env=env)
            finally:
                index.unlink(missing_ok=True)
            text += (
                f"\n# Not committed yet (changes in {worktree.path} since the last turn's "
                "commit):\n\n" + pending.out
            )
        return text

    async def committed(self, context_id: str, commit: str) -> Patch:
        """What `commit`, one on the conversation's branch, changed against its parent:
        a turn's real change, whatever its agent reported of it."""
        if not _SHA.fullmatch(commit):
            raise GitError(f"{commit!r} is not a commit's full id")
        worktree = await self.records.require(context_id)
        own = await self.repo.conversation(worktree.path)
        tip = await self.repo.tip(worktree.branch, own)
        on_branch = await git(own, "merge-base", "--is-ancestor", commit, tip, ok=(0, 1))
        if on_branch.code != 0:
            raise GitError(f"{commit[:12]} is not on {worktree.branch}")
        return await between(own, f"{commit}^", commit)
