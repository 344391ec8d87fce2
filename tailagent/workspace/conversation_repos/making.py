"""Making a conversation's directory: its branch's name, the branch it starts from, its
record and then a repository of its own checked out there.

The order is the point: the record is written before the directory exists, so a crash in
between leaves a record (which discard and prune clear) and never an unmarked directory
tailagent would then not dare to touch. Shared by a conversation's own directory, one
made ahead and an idle conversation's waking, which differ in everything else.

The repository is made by `git init` in the directory, its `objects/info/alternates`
naming the base's object stores (what `git clone --shared` writes), its branch made at the
base commit by the checkout. Not `git clone --shared`: a clone copies every branch and tag
of the base into the conversation's refs (an agent would see the person's other branches,
and `refs/remotes/origin` would name the base's path) and writes the base's path into its
config as `origin`; `git init` starts it with nothing but the commit it needs, which the
alternates make readable, and the base branch as it was then under its own name (`main`:
what the agent reads the base's work by and rebases onto; see WorkspaceRepo.show_base).
Nothing is copied: a new conversation costs a `git init` and an `update-ref` more than
`git worktree add` did, and its own commits, objects and refs are written in its own
directory, where no other conversation can read them (its sandbox sees only it, and the
base's objects read-only).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

from tailagent.workspace.conversation_repos.plumbing.fs import is_dir, unlink
from tailagent.workspace.conversation_repos.plumbing.porcelain import unique
from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo
from tailagent.workspace.conversation_repos.probe import probe
from tailagent.workspace.conversation_repos.records import BRANCH_PREFIX, Records, Worktree, fresh
from tailagent.workspace.git import GitError, git

# Who a conversation belongs to (the store's conversation owners), None when nobody does.
OwnerOf = Callable[[str], Awaitable[str | None]]


@dataclass
class Maker:
    """Makes worktrees of `repo` under the records' root; `base` is the branch they start
    from (None: the workspace's current branch when each is made); `owner_of` says whose
    a conversation is (None: not known here, so every conversation's branch is avoided)."""

    repo: WorkspaceRepo
    records: Records
    base: str | None
    owner_of: OwnerOf | None = None

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

    async def record_new(
        self, context_id: str, branch: str, base_branch: str, slug: str | None = None
    ) -> tuple[Worktree, Path]:
        """A new worktree's record, written before the worktree exists (so a crash leaves
        a record, never an unmarked worktree); the record's path."""
        base_commit = await self.repo.tip(base_branch)
        root = self.records.root
        name = "" if slug else self.free_name(context_id)
        path = root.resolve() / (slug or name)
        if path.exists():
            raise GitError(
                f"{path} exists but tailagent has no record of it: move it away to let "
                f"conversation {context_id} have a worktree"
            )
        worktree = replace(fresh(context_id, path, branch, base_branch, base_commit), name=name)
        record = self.records.ready_record(path) if slug else self.records.record_path(context_id)
        await self.records.save(worktree, record)
        return worktree, record

    async def check_out(self, worktree: Worktree, record: Path, detach: bool = False) -> None:
        """Makes the directory a repository of its own (see the module's docstring) and
        checks the base commit out there: on the conversation's new branch, or `detach`ed
        (one made ahead, whose branch is made when a conversation takes it)."""
        path = worktree.path
        on = ["--detach"] if detach else ["-B", worktree.branch]
        try:
            await self.repo.init_conversation(path, worktree.branch)
            own = await self.repo.conversation(path)
            await git(own.slow(), "checkout", "-q", "-f", *on, worktree.base_commit)
            await self.repo.show_base(own, worktree.base_branch, worktree.base_commit, fresh=True)
        except BaseException:
            # Once the directory is there (a checkout that failed, or only the person's
            # post-checkout hook), the record stays so that it is known as tailagent's
            # (and discard or prune can remove it).
            if not is_dir(path):
                unlink(record)
            raise

    async def free_branch(self, context_id: str) -> str:
        """`tailagent/<first 8 characters>`, or a longer or numbered name when another
        conversation of the same owner has it already (context ids need not be random).

        Unique per owner, not across everyone: were another person's branches avoided
        too, bob's longer name would tell him that someone else's conversation id starts
        as his does. Nothing needs more: branches live in each conversation's own
        repository (a merge brings only the merged commit into the base, under no branch
        of this name), and a name people type back (`tailagent merge <short>`) is looked
        up among their own conversations only (bridge/conversations/names.py); an admin,
        who may act on both, is refused the name and told both ids. Without `owner_of`,
        or for a conversation whose owner is not known, every other record's is avoided."""
        clean = re.sub(r"[^A-Za-z0-9_-]", "-", context_id) or "conversation"
        candidates = [clean[:8], clean[:40]] + [f"{clean[:40]}-{n}" for n in range(2, 100)]
        holders: dict[str, list[str]] = {}
        for other, branch in self.records.branches(but=context_id).items():
            holders.setdefault(branch, []).append(other)
        for short in unique(candidates):
            if not await self._taken(context_id, holders.get(BRANCH_PREFIX + short, [])):
                return BRANCH_PREFIX + short
        raise GitError(f"no free branch name for conversation {context_id}")

    def free_name(self, context_id: str) -> str:
        """The name a person finds the conversation's directory by in the root: its first
        8 characters (as `tailagent conversations` shows it), or more, or numbered, when
        that is taken (the root holds everyone's). Under the shared lock, so no two
        conversations are given one name."""
        clean = re.sub(r"[^A-Za-z0-9_-]", "-", context_id).lstrip("-") or "conversation"
        taken = self.records.names_taken()
        candidates = [clean[:8], clean[:40]] + [f"{clean[:40]}-{n}" for n in range(2, 1000)]
        for name in unique(candidates):
            if name not in taken and f"{name}.json" not in taken:
                return name
        raise GitError(f"no free directory name for conversation {context_id}")

    async def _taken(self, context_id: str, holders: list[str]) -> bool:
        """Whether a name the conversations `holders` have is not free for `context_id`:
        one of them has its owner, or an owner is not known (then the name is avoided)."""
        if not holders:
            return False
        owner = await self.owner_of(context_id) if self.owner_of is not None else None
        if owner is None or self.owner_of is None:
            return True
        for holder in holders:
            if await self.owner_of(holder) in (owner, None):
                return True
        return False
