"""Each conversation's branch pushed, as its turns commit, to a repository every box of a
team reads (`workspace.shared_repository`), and taken from there by another box when the
box that ran it is gone.

A conversation's commits live in its own repository, on the disk of the box that ran it
(making.py). On one box that is all there is; among a team's boxes sharing a store, a box
that dies would take every unmerged commit of its conversations with it. So after each
turn the conversation's branch tip is pushed to the shared repository, under a ref named
by a hash of the conversation's id (`refs/tailagent/conversations/<hex>`: any id a caller
chose makes a valid ref, and none names another's), and a box asked to go on with a
conversation whose box is gone makes its repository from that commit (`take`).

Why a bare repository the operator names, not one tailagent keeps beside the store: a
store is a PostgreSQL URL, and a database holds no git; the boxes already reach each other
over the tailnet, but a dead box is exactly the one that cannot be asked. A path on a
disk every box mounts, or a git server the team already runs (ssh or https), is a place
the operator already backs up and that outlives any one box.

The push never runs git in the conversation's repository with a transport on: its config
is the agent's, and could name a `url.<base>.insteadOf`, a `core.sshCommand` or a
`remote.*.receivepack` that git would obey. The branch is first fetched into a scratch
repository of tailagent's (merge/quarantine.py: the conversation's `.git` looked at
first, upload-pack run with every program off, every object checked), and pushed from
there, where the config is tailagent's and only the shared repository's transport is
allowed. A take fetches into a repository tailagent has just made, before any agent ran
in it, and checks every object it takes.
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from tailagent.config.checks import remote_protocol
from tailagent.workspace.conversation_repos.lock import WorktreeLock
from tailagent.workspace.conversation_repos.making import Maker
from tailagent.workspace.conversation_repos.merge.quarantine import (
    FETCH,
    UPLOAD_PACK_OPTION,
    scratch,
)
from tailagent.workspace.conversation_repos.plumbing.fs import is_dir, unlink
from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo
from tailagent.workspace.conversation_repos.records import Records, Worktree
from tailagent.workspace.conversation_repos.removal import Removal
from tailagent.workspace.git import GitError, GitResult, Repository, Setting, git, one_line

log = logging.getLogger(__name__)

REFS = "refs/tailagent/conversations/"
# A local shared repository's receive-pack: no hook, fsmonitor or maintenance of its
# config runs (they would run as this server). A repository another user owns is
# refused by git itself ("dubious ownership"), and the push says so.
_RECEIVE_PACK = (
    f"git -c core.hooksPath={os.devnull} -c core.fsmonitor=false -c gc.auto=0 "
    "-c maintenance.auto=false -c receive.autogc=false receive-pack"
)
_TAKEN = "refs/tailagent/taken"


def ref_of(context_id: str) -> str:
    """The shared repository's ref for a conversation's branch."""
    return REFS + hashlib.sha256(context_id.encode()).hexdigest()[:40]


class Handover:
    """Pushes the conversations' branches of `repo` to the repository at `url`, and
    takes one from there."""

    def __init__(
        self,
        repo: WorkspaceRepo,
        records: Records,
        lock: WorktreeLock,
        maker: Maker,
        removal: Removal,
        url: str,
    ) -> None:
        self.repo = repo
        self.records = records
        self.lock = lock
        self.maker = maker
        self.removal = removal
        self.url = url
        protocol = remote_protocol(url)
        self._reach: tuple[Setting, ...] = ((f"protocol.{protocol}.allow", "always"),)
        # A local shared repository's upload-pack and receive-pack run here, as this
        # server's user, with that repository's config and hooks: with every program
        # off, as a conversation's upload-pack runs (a teammate who can write the shared
        # repository must not run a hook as the server). A remote one runs its server's.
        local = protocol == "file"
        self._fetch = FETCH if local else tuple(a for a in FETCH if a != UPLOAD_PACK_OPTION)
        self._listing = (UPLOAD_PACK_OPTION,) if local else ()
        self._pushing = (f"--receive-pack={_RECEIVE_PACK}",) if local else ()

    async def push(self, context_id: str) -> str | None:
        """Pushes the conversation's branch tip; the commit pushed, or None when it has no
        branch here or its branch holds nothing but where it started. Under the
        conversation's lock, so a turn's commit and its push are not overtaken by the
        next turn's."""
        async with self.lock.conversation(self.records.slug(context_id)):
            worktree = await self.records.load(context_id)
            if worktree is None or worktree.idle or not is_dir(worktree.path):
                return None
            own = await self.repo.conversation(worktree.path)
            if await self.repo.tip(worktree.branch, own) == worktree.base_commit:
                return None
            async with scratch(self.repo, self.records.root) as made:
                commit = await made.take(own, worktree.branch)
                await self._push(made.repository, f"+{commit}:{ref_of(context_id)}")
            return commit

    async def drop(self, context_id: str) -> None:
        """Deletes the conversation's ref (merged or discarded: nothing is left to take
        over). The merge or discard it follows has happened: a push that fails is said,
        not raised (the ref left would let another box take the branch up again)."""
        try:
            async with scratch(self.repo, self.records.root) as made:
                pushed = await self._push(made.repository, f":{ref_of(context_id)}", ok=(0, 1))
            if pushed.code and "does not exist" not in pushed.err:  # never pushed: nothing kept
                raise GitError(one_line(pushed.err))
        except (GitError, OSError) as exc:
            log.warning("the shared repository keeps conversation %s's branch: %s",
                        context_id, exc)  # fmt: skip

    async def _push(
        self, repository: Repository, refspec: str, ok: tuple[int, ...] = (0,)
    ) -> GitResult:
        return await git(repository.with_settings(*self._reach).slow(), "push", "-q", "--no-verify",
                  "--no-recurse-submodules", *self._pushing, self.url, refspec, ok=ok)  # fmt: skip

    async def pushed(self, context_id: str) -> str | None:
        """The commit the shared repository holds for the conversation, or None."""
        async with scratch(self.repo, self.records.root) as made:  # a config of tailagent's
            found = await git(made.repository.with_settings(*self._reach), "ls-remote",
                              *self._listing, "--exit-code", self.url, ref_of(context_id),
                              ok=(0, 2))  # fmt: skip
        return found.out.split()[0] if found.code == 0 and found.out.strip() else None

    async def take(self, context_id: str) -> str | None:
        """Makes the conversation's repository here from the commit the shared repository
        holds for it, on a branch of its own, the base branch shown beside it as a new
        conversation's is, unless this box's own copy is at that commit already; the
        commit the conversation goes on from, or None when the shared repository holds
        none (the conversation gets a new repository from the base, as any does).

        A copy this box kept from before the conversation went on elsewhere (it ran here,
        this box stopped, another took it over and committed more) is behind the shared
        commit: it is removed and the conversation made again from the shared one, which
        holds every commit of the copy (each was pushed as it was made)."""
        async with self.lock.conversation(self.records.slug(context_id)):
            commit = await self.pushed(context_id)
            if commit is None:
                return None
            existing = await self.records.load(context_id)
            if existing is not None:
                if await self._at(existing, commit):
                    return commit
                log.info("conversation %s: this box's copy is behind the shared repository's "
                         "%s; it is replaced", context_id, commit[:12])  # fmt: skip
                await self.removal.remove(existing)
            base_branch = await self.maker.base_branch(context_id)
            async with self.lock.exclusive():
                branch = await self.maker.free_branch(context_id)
                worktree, record = await self.maker.record_new(context_id, branch, base_branch)
            await self._check_out(worktree, record, context_id, commit)
            return commit

    async def _at(self, worktree: Worktree, commit: str) -> bool:
        """Whether this box's copy of a conversation is on its branch at `commit`."""
        if worktree.idle or not is_dir(worktree.path):
            return False
        own = await self.repo.trusted(worktree.path)
        if own is None:
            return False
        try:
            return await self.repo.tip(worktree.branch, own) == commit
        except GitError:
            return False

    async def _check_out(
        self, worktree: Worktree, record: Path, context_id: str, commit: str
    ) -> None:
        """The repository made, the shared commit fetched into it and checked out on the
        conversation's branch (the record stays once the directory exists, as making.py
        keeps it)."""
        path = worktree.path
        try:
            await self.repo.init_conversation(path, worktree.branch)
            own = await self.repo.conversation(path)
            fetching = own.with_settings(*self._reach, ("fetch.fsckObjects", "true")).slow()
            await git(fetching, *self._fetch, self.url, f"+{ref_of(context_id)}:{_TAKEN}")
            found = await git(own, "rev-parse", "--verify", f"{_TAKEN}^{{commit}}")
            if found.out.strip() != commit:
                raise GitError(
                    f"the shared repository's branch of conversation {context_id} moved "
                    "while it was taken: ask again"
                )
            await git(own, "update-ref", "-d", _TAKEN)
            await git(own.slow(), "checkout", "-q", "-f", "-B", worktree.branch, commit)
            await self.repo.show_base(own, worktree.base_branch, worktree.base_commit, fresh=True)
        except BaseException:
            if not is_dir(path):
                unlink(record)
            raise
