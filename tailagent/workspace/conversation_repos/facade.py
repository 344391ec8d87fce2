"""`ConversationRepos`: the one object the bridge talks to about conversations'
repositories.

It makes the shared pieces once (git for the workspace, the records, the lock) and hands
them to each concern's collaborator explicitly; its methods say which concern answers.
Nothing else lives here: a change to merging, cleanup or the worktree made ahead is made
in that concern's file, and the bridge never learns which one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tailagent.workspace.conversation_repos.ahead import MadeAhead
from tailagent.workspace.conversation_repos.changes import Changes, WorktreeStatus
from tailagent.workspace.conversation_repos.ending.cleanup import Cleanup, DiscardResult
from tailagent.workspace.conversation_repos.fates import Fate, Fates
from tailagent.workspace.conversation_repos.handover import Handover
from tailagent.workspace.conversation_repos.idle import Idle
from tailagent.workspace.conversation_repos.legacy import Legacy
from tailagent.workspace.conversation_repos.lock import WorktreeLock
from tailagent.workspace.conversation_repos.making import Maker, OwnerOf
from tailagent.workspace.conversation_repos.merge.merging import (
    MergePreview,
    MergeResult,
    Merging,
    Strategy,
)
from tailagent.workspace.conversation_repos.origin import Start, start_of
from tailagent.workspace.conversation_repos.patches import Patch
from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo
from tailagent.workspace.conversation_repos.records import Merged, Records, Worktree
from tailagent.workspace.conversation_repos.removal import Removal
from tailagent.workspace.conversation_repos.turns import TurnCommits


class ConversationRepos:
    """The repositories of one workspace repository's conversations: each a repository
    of its own under `root`, borrowing the workspace's objects (see making.py).

    `root` is `<state dir>/worktrees`. `base` is the branch conversations start from and
    merge back into; None means the repository's current branch when each starts.
    Operations that change a conversation are serialized by its own lock (no turn commit
    in the middle of its merge), and what the conversations share by one lock that no
    git on an agent's files runs under (lock.py). `git_programs` lets tailagent's git run
    the hooks and filter and merge drivers the repository's config names (see git.py);
    off, none runs. `shared` names the repository each conversation's branch is pushed to
    after its turns, for a team's other boxes (handover.py); None keeps them here only.
    """

    def __init__(
        self,
        repo: Path,
        root: Path,
        base: str | None = None,
        git_programs: bool = False,
        shared: str | None = None,
    ) -> None:
        self.repo = repo
        self.root = root
        # The shared pieces, made once and handed to each collaborator that needs them.
        self._git = git = WorkspaceRepo(repo, root, git_programs)
        self._lock = lock = WorktreeLock(root)
        self._records = records = Records(root, git)
        # An older tailagent's worktrees are made repositories of their own where records
        # are opened, once (legacy.py): no method here asks for it.
        records.opening = Legacy(git, records, lock).opening
        self._removal = removal = Removal(git, records)
        self._maker = maker = Maker(git, records, base)
        self._ahead = ahead = MadeAhead(git, records, lock, maker, removal)
        self._idle = idle = Idle(git, records, lock, maker, removal)
        self._turns = TurnCommits(git, records, lock)
        self._changes = Changes(git, records)
        self._fates = fates = Fates(records)
        self._cleanup = Cleanup(git, records, lock, ahead, idle, removal, fates)
        self._merging = Merging(git, records, lock, removal, fates)
        self._handover = Handover(git, records, lock, maker, removal, shared) if shared else None

    def know_owners(self, owner_of: OwnerOf) -> None:
        """Whose each conversation is (the store's owners, opened after the worktrees):
        a branch's name is then unique among its owner's conversations only (see
        Maker.free_branch); until then, among everyone's."""
        self._maker.owner_of = owner_of

    def shared_objects(self) -> tuple[Path, ...]:
        """The object stores a conversation's repository borrows (the base's own, and
        those its alternates name): all a conversation needs outside its directory, which
        the sandbox shows it read-only."""
        return self._git.shared_objects()

    # ---- what is tailagent's ------------------------------------------------------

    def conversations(self, idle: bool = False) -> list[str]:
        """The conversations that hold a worktree and branch now (see Records)."""
        return self._records.conversations(idle)

    def known(self) -> dict[str, str]:
        """Every conversation tailagent keeps something of here -> its branch's short name."""
        return self._records.known()

    def merged(self, context_id: str) -> Merged | None:
        """Where the conversation's last merge went, if it was merged here."""
        return self._records.merged(context_id)

    async def fate(self, context_id: str, branch: str, commit: str) -> Fate:
        """What became of a turn's change on `branch` (its commit, or ""): "merged",
        "discarded", or "" while the branch holds it (see Fates.of). Reads records only."""
        return self._fates.of(context_id, branch, commit, await self._records.load(context_id))

    def explained(self) -> bool:
        """Whether a start here already said what worktree mode does; marks it said."""
        return self._records.explained()

    async def get(self, context_id: str) -> Worktree | None:
        """The conversation's worktree, or None when it has none."""
        return await self._records.load(context_id)

    # ---- a conversation's worktree -----------------------------------------------

    async def ensure(self, context_id: str) -> Worktree:
        """The conversation's worktree: on its first call one made ahead (`prepare`),
        brought to the base branch's tip, or else one made now. When one is still being
        made ahead it is waited for: it is nearer done than a new one would be, and two
        checkouts at once only slow each other down.

        The record is written before the directory is made, so a crash in between leaves
        a record (which `discard` and `prune` clear) rather than an unmarked directory that
        tailagent would then never dare to touch. Under the conversation's lock; the
        shared one only while a branch name is chosen and kept in a record (lock.py).
        """
        async with self._lock.conversation(self._records.slug(context_id)):
            while True:
                existing = await self._records.load(context_id)
                if existing is not None and existing.idle:
                    return await self._idle.wake(existing)
                if existing is not None:
                    if existing.path.is_dir():
                        self._records.link(existing)  # a stop cut its adoption short
                        return existing
                    if not existing.own_repository:  # its commits on a branch of the base
                        await self._records.require(context_id)  # raises WorktreeDeleted
                    # A record without its directory: a creation cut short, or deleted by
                    # hand, its repository with it. Nothing left to lose: start again.
                    await self._removal.remove(existing)
                base_branch = await self._maker.base_branch(context_id)
                adopted = await self._ahead.adopt(context_id, base_branch)
                if adopted is not None:
                    return adopted
                making = list(self._ahead.making.values())
                if not making:
                    async with self._lock.exclusive():
                        branch = await self._maker.free_branch(context_id)
                        made = await self._maker.record_new(context_id, branch, base_branch)
                    await self._maker.check_out(*made)
                    return made[0]
                await asyncio.wait(making)

    async def start_of(self, worktree: Worktree) -> Start:
        """Where a conversation starting now in `worktree` starts, and what of the
        person's checkout it does not hold (see origin.py)."""
        return await start_of(self._git, worktree)

    async def release(self, context_id: str) -> bool:
        """After a turn that changed nothing, the branch goes and the worktree waits
        idle for the next turn (see Idle.release); True when it was released."""
        return await self._idle.release(context_id)

    async def prepare(self) -> Path:
        """Makes a worktree ahead of the next new conversation; returns its path."""
        return await self._ahead.prepare()

    def ready(self) -> list[Path]:
        """The worktrees made ahead and not yet taken, oldest (next to be taken) first."""
        return self._ahead.ready()

    async def drop_ready(self) -> int:
        """At a clean stop: removes the worktrees made ahead (see MadeAhead.drop_all)."""
        async with self._lock.exclusive():
            return await self._ahead.drop_all()

    async def commit_turn(
        self, context_id: str, subject: str, trailers: list[tuple[str, str]]
    ) -> str | None:
        """Commits what the turn changed, with who asked in its trailers (see TurnCommits);
        the commit's sha, or None when nothing changed."""
        return await self._turns.commit(context_id, subject, trailers)

    # ---- the team's shared repository -------------------------------------------

    @property
    def hands_over(self) -> bool:
        """Whether branches are pushed to a shared repository (see handover.py)."""
        return self._handover is not None

    async def hand_over(self, context_id: str) -> str | None:
        """Pushes the conversation's branch tip to the shared repository; the commit, or
        None when there is none (or no shared repository)."""
        return await self._handover.push(context_id) if self._handover else None

    async def take_over(self, context_id: str) -> str | None:
        """Makes the conversation's repository here from the shared repository's commit of
        it, unless this box's copy is at it; the commit it goes on from, or None when the
        shared repository holds none."""
        return await self._handover.take(context_id) if self._handover else None

    async def _let_go(self, context_id: str) -> None:
        """The shared repository forgets a conversation merged or discarded here."""
        if self._handover is not None:
            await self._handover.drop(context_id)

    # ---- status and diff ----------------------------------------------------------

    async def status(self, context_id: str) -> WorktreeStatus:
        """Where the conversation's branch stands against its base's current tip."""
        return await self._changes.status(context_id)

    async def diff(self, context_id: str) -> str:
        """The whole conversation as a patch, then what is not committed yet."""
        return await self._changes.diff(context_id)

    async def committed(self, context_id: str, commit: str) -> Patch:
        """What one of the conversation's commits changed (a turn's, read from git)."""
        return await self._changes.committed(context_id, commit)

    # ---- cleanup ------------------------------------------------------------------

    async def would_lose(self, context_id: str) -> DiscardResult:
        """What `discard` would lose, so it can be said before anything is removed."""
        return await self._cleanup.would_lose(context_id)

    async def discard(self, context_id: str) -> DiscardResult:
        """Removes the conversation's worktree, branch and record; returns what was lost."""
        lost = await self._cleanup.discard(context_id)
        await self._let_go(context_id)
        return lost

    async def prune(self, live: set[str]) -> list[str]:
        """Removes what tailagent keeps of conversations not in `live`; their ids."""
        return await self._cleanup.prune(live)

    async def aclose(self) -> None:
        """Waits for retired worktrees to be deleted (a stop mid-way is finished later)."""
        await self._ahead.aclose()
        await self._removal.aclose()

    # ---- merging ------------------------------------------------------------------

    async def preview(self, context_id: str) -> MergePreview:
        """What a merge of the conversation would bring, read before anything is merged
        (see Merging.preview)."""
        return await self._merging.preview(context_id)

    async def merge(
        self,
        context_id: str,
        strategy: Strategy = "squash",
        keep: bool = False,
        expect: str | None = None,
    ) -> MergeResult:
        """Merges the conversation's branch into its base (only from the tip `expect`
        names, when given), then, unless `keep`, removes its worktree and branch (see
        Merging.merge for what is refused)."""
        merged = await self._merging.merge(context_id, strategy, keep, expect)
        if merged.removed:
            await self._let_go(context_id)
        return merged
