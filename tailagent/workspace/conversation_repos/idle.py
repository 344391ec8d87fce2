"""A conversation whose turns changed nothing: its branch goes (a "hello" leaves none
behind) and its directory waits, detached, for the next turn, which makes the branch again
at the base's tip in the same place (its agent session finds its directory where it was).
The branch is in the conversation's own repository, so that is where it goes and comes.

Apart from making and removal because it is the one state between the two: a worktree
kept while its branch is gone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tailagent.workspace.conversation_repos.lock import WorktreeLock
from tailagent.workspace.conversation_repos.making import Maker
from tailagent.workspace.conversation_repos.plumbing.fs import is_dir
from tailagent.workspace.conversation_repos.plumbing.gitdirs import in_progress
from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo
from tailagent.workspace.conversation_repos.records import Records, Worktree, fresh
from tailagent.workspace.conversation_repos.removal import Removal
from tailagent.workspace.git import GitError, git


@dataclass
class Idle:
    """Idles and wakes the conversations' worktrees of `repo`."""

    repo: WorkspaceRepo
    records: Records
    lock: WorktreeLock
    maker: Maker
    removal: Removal

    async def release(self, context_id: str) -> bool:
        """After a turn that changed nothing: when the conversation's branch has nothing
        its base lacks and its worktree nothing uncommitted, the branch goes (a "hello"
        leaves none behind) and the worktree waits detached, idle, for the
        conversation's next turn: its agent session may still be working there. True
        when it was released."""
        async with self.lock.conversation(self.records.slug(context_id)):
            return await self.release_locked(context_id)

    async def release_locked(self, context_id: str) -> bool:
        """`release`, for a caller that holds the conversation's lock already. Its
        branch's name stays its own: an idle record keeps it (Records.branches)."""
        worktree = await self.records.load(context_id)
        if worktree is None or worktree.idle or not is_dir(worktree.path):
            return False
        if not worktree.own_repository:  # an older tailagent's, not converted (legacy.py)
            return False
        own = await self.repo.trusted(worktree.path)
        if own is None or not await self.repo.ref_exists(f"refs/heads/{worktree.base_branch}"):
            return False
        branch = f"refs/heads/{worktree.branch}"
        try:
            tip = await self.repo.tip(worktree.branch, own)
        except GitError:
            return False
        base_tip = await self.repo.tip(worktree.base_branch)
        ahead = await git(own, "rev-list", "--count", tip, "--not", base_tip)
        if int(ahead.out) != 0:
            return False
        if in_progress(own.git_dir) or await self.repo.uncommitted(own):
            return False
        head = await git(own, "symbolic-ref", "-q", "HEAD", ok=(0, 1))
        if head.out.strip() != branch:
            return False
        await git(own, "update-ref", "--no-deref", "HEAD", tip)
        await git(own, "update-ref", "-d", branch, tip)
        await self.records.save(replace(worktree, idle=True))
        return True

    async def wake(self, idle: Worktree) -> Worktree:
        """An idle conversation's next turn: its branch made again at the base's tip, in
        its own worktree (checked out again at the same path if a start removed it), so
        its agent session finds its directory where it was. Under the conversation's lock;
        the shared one is taken only to choose the branch's name and keep it in the
        record (still idle, so a stop half-way leaves a conversation to wake again), and
        the git on its files runs after."""
        base_branch = await self.maker.base_branch(idle.context_id)
        base_commit = await self.repo.tip(base_branch)
        async with self.lock.exclusive():
            branch = await self.maker.free_branch(idle.context_id)
            await self.records.save(replace(idle, branch=branch))
        woken = fresh(idle.context_id, idle.path, branch, base_branch, base_commit)
        woken = replace(woken, name=idle.name)
        record = self.records.record_path(idle.context_id)
        if not is_dir(idle.path):
            await self.records.save(woken)
            await self.maker.check_out(woken, record)
            return woken
        own = await self.repo.conversation(idle.path)
        if await self.repo.uncommitted(own):  # written meanwhile: kept, the branch starts here
            base_commit = (await git(own, "rev-parse", "HEAD")).out.strip()
            woken = replace(woken, base_commit=base_commit)
        else:
            await git(own.slow(), "reset", "-q", "--hard", base_commit)
        await git(own, "update-ref", f"refs/heads/{branch}", base_commit)
        await git(own, "symbolic-ref", "HEAD", f"refs/heads/{branch}")
        await self.repo.show_base(own, base_branch, base_commit)
        await self.records.save(woken)
        return woken

    async def shelve(self, context_id: str) -> None:
        """At a start, the worktree of a conversation that changed nothing goes (no agent
        session is in it yet; a branch left by an older tailagent goes too); its record
        stays, so its next turn checks it out again at the same path. Under the
        conversation's lock."""
        await self.release_locked(context_id)
        worktree = await self.records.require(context_id, present=False)
        if not worktree.idle or not is_dir(worktree.path):
            return
        own = await self.repo.trusted(worktree.path)
        if own is not None and not await self.repo.uncommitted(own):
            self.removal.retire(worktree.path)
