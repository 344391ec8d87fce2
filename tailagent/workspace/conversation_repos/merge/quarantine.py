"""Bringing a conversation's commits into the person's repository, only when a merge lands.

A conversation's commits live in its own repository; the base learns of them at a merge
only. Even then, not before it succeeds: the conversation's branch is fetched into a
scratch repository in the state dir (`<root>/.merging/<hex>`, which borrows the base's
objects as the conversations do), the merged commit is built there by the base's own git
(its config, its attributes) writing new objects to the scratch repository's store
(`GIT_OBJECT_DIRECTORY`), and only the merged commit, with what it needs that the base
lacks, is fetched into the base before the base branch moves. A conflict or a refusal
leaves the base's objects as they were, so no other conversation, whose sandbox reads the
base's objects, can read an unmerged one's; a squash brings the sum of the changes, not
each turn's commit. The scratch repository is deleted when the merge ends, whatever way.

Both fetches are from a repository named by its path, with the `file` transport allowed
for that call only (every other transport stays off). The first runs `git upload-pack`
in the conversation's repository, whose config the agent writes and which git's local
transport reads without tailagent's `-c` settings (it clears them for the other side). What
that config could make upload-pack run, and why it cannot:
- `uploadpack.packObjectsHook`: git honours it only from the system, global or command
  line config, never a repository's;
- `core.fsmonitor`, `core.hooksPath`: upload-pack reads no index and runs no hook (and
  `_UPLOAD_PACK` switches both off anyway, on its own command line);
- a transport, through a lazy fetch of a missing object (`extensions.partialClone`, a
  remote's URL or `core.sshCommand`): `protocol.allow=never` on upload-pack's command line
  (and `GIT_NO_LAZY_FETCH`, for a git that knows it);
- `core.alternateRefsCommand`: only the fetching side runs it, and that is tailagent's
  scratch repository.
When the server is root the conversation's repository is its agent's uid's
(sandbox/users.py), and upload-pack would refuse it as of "dubious ownership": `_UPLOAD_PACK`
names `safe.directory` on its command line, as repository.py does for every other call in
a conversation's repository (tailagent names it outright, and runs nothing it configures).
Before the fetch, plumbing/guard.py has looked at the conversation's `.git` (its alternates name the
base's objects only, no `commondir`, no symbolic link). The fetch checks every object it
takes (`fetch.fsckObjects`).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import secrets
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo
from tailagent.workspace.git import NO_HOOKS, NO_PROGRAMS, Repository, git

# Scratch repositories of merges under way (`.` starts no context id as a file name).
MERGING = ".merging"
_INTO = "refs/tailagent/merging"
_OUT = "refs/tailagent/merged"
_FILE_ONLY = (("protocol.file.allow", "always"),)
_UPLOAD_PACK = (
    "GIT_NO_LAZY_FETCH=1 git -c protocol.allow=never -c core.fsmonitor=false "
    f"-c core.hooksPath={os.devnull} -c gc.auto=0 -c maintenance.auto=false "
    "-c safe.directory='*' upload-pack"
)
UPLOAD_PACK_OPTION = f"--upload-pack={_UPLOAD_PACK}"
FETCH = ("fetch", "-q", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules",
         "--no-auto-maintenance", UPLOAD_PACK_OPTION)  # fmt: skip


@dataclass(frozen=True)
class Scratch:
    """A merge's scratch repository: `repository` for git in it, `base` for the base's
    own git with new objects written here and the base's read through its alternates."""

    path: Path
    repository: Repository
    base: Repository

    async def take(self, own: Repository, branch: str) -> str:
        """Fetches exactly the conversation's `branch` from its repository `own`; the
        commit it is at."""
        checked = self.repository.with_settings(*_FILE_ONLY, ("fetch.fsckObjects", "true"))
        source = str(own.git_dir)
        await git(checked.slow(), *FETCH, source, f"+refs/heads/{branch}:{_INTO}")
        found = await git(self.repository, "rev-parse", "--verify", f"{_INTO}^{{commit}}")
        return found.out.strip()

    async def deliver(self, commit: str, main: Repository) -> None:
        """Brings `commit` and what it needs that the base lacks into the base's objects
        (no ref of the base changes here)."""
        await git(self.repository, "update-ref", _OUT, commit)
        await git(main.with_settings(*_FILE_ONLY).slow(), *FETCH, str(self.path), _OUT)


@contextlib.asynccontextmanager
async def scratch(repo: WorkspaceRepo, root: Path) -> AsyncIterator[Scratch]:
    """A scratch repository for one merge, deleted when it ends (see the docstring).
    Locked while it lives (an advisory lock on its directory): a merge builds outside the
    lock the conversations share, and a prune's `sweep` beside it leaves it alone."""
    path = root / MERGING / secrets.token_hex(6)
    path.parent.mkdir(exist_ok=True, mode=0o700)
    path.mkdir(mode=0o700)
    held = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        object_format = f"--object-format={await repo.object_format()}"
        await git(path.parent, "init", "-q", "--bare", "--template=", object_format, str(path))
        (path / "objects" / "info").mkdir(exist_ok=True)
        (path / "objects" / "info" / "alternates").write_text(repo.alternates())
        repository = Repository(path, path, NO_PROGRAMS + NO_HOOKS)
        main = await repo.main()
        base = replace(main, env=(*main.env, ("GIT_OBJECT_DIRECTORY", str(path / "objects"))))
        yield Scratch(path, repository, base)
    finally:
        await asyncio.to_thread(shutil.rmtree, path, ignore_errors=True)
        os.close(held)


def sweep(root: Path) -> None:
    """What a stop in the middle of a merge left (its scratch repositories): those no
    merge under way holds locked."""
    merging = root / MERGING
    for path in merging.iterdir() if merging.is_dir() else ():
        try:
            held = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            with contextlib.suppress(OSError):
                path.unlink()  # not a directory: nothing of a merge
            continue
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # a merge under way
        finally:
            os.close(held)
        shutil.rmtree(path, ignore_errors=True)
