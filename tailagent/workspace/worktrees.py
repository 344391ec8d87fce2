"""A git worktree and branch per conversation, merged back only on request.

Conversations served at the same time must not edit one working directory: one
caller's half-finished change would land in another's test run. So each A2A context
gets its own worktree (`<root>/<context>`) on its own branch (`tailagent/<short id>`),
made from the workspace's branch at the conversation's start, and a commit per turn.

What is tailagent's is decided by a record, `<root>/<context>.json`, written before the
worktree exists and removed after it is gone: a worktree or branch without a record is
never touched, whatever its name. Merging back never touches a person's work: the
result is built in git's object store first (`git merge-tree`, `git commit-tree`), a
checkout is only fast-forwarded when it is clean, and every refusal or conflict leaves
the base branch, its working tree and its index as they were.

The agent may write any file of its worktree, `.git` included. So git is always told
which git dir a worktree has: the one git made for it, found from git's own record in the
repository (`<common dir>/worktrees/<name>/gitdir` names the worktree), never from the
worktree's `.git`. A `.git` that no longer names that git dir is reported
(WorktreeTampered) and not followed; the turn's changes are not committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from tailagent.files import write_private
from tailagent.workspace.git import (
    NO_HOOKS,
    NO_PROGRAMS,
    GitError,
    Repository,
    git,
    one_line,
    without_drivers,
)

log = logging.getLogger(__name__)

BRANCH_PREFIX = "tailagent/"
FALLBACK_NAME = "tailagent"
FALLBACK_EMAIL = "tailagent@localhost"
SUBJECT_LIMIT = 72
LOCK_WAIT = 60.0  # seconds another process may hold the worktrees' lock (a long rebase)
# A worktree made ahead of the conversation that will take it is named `+ready-<hex>`:
# `+` is never in a context id used as a file name (see _SAFE_ID), so no caller's
# conversation can be mistaken for one. Retired worktrees wait in `.trash` for removal.
READY_PREFIX = "+ready-"
TRASH = ".trash"
# What was merged, by conversation (`.merged/<name>.json`): a second merge can say where
# the first went. `.` starts no context id used as a file name either.
MERGED = ".merged"
# The repositories whose first start here was told what worktree mode does there.
EXPLAINED = ".explained"
# git compares a file whose mtime is the index's own second by content, on every status:
# an index written just after a checkout makes each status read every file (~60 ms on
# 10,000 files against ~10). A worktree made ahead is refreshed once this much later.
RACY_SECONDS = 1.1

Strategy = Literal["squash", "merge", "rebase"]
STRATEGIES: tuple[Strategy, ...] = ("squash", "merge", "rebase")

# Context ids come from callers: only ids that are plainly safe as a file name are used
# as one; any other id gets a name derived from its hash (the record keeps the real id).
_SAFE_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")
_TRAILER_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")
_IN_PROGRESS = (
    ("rebase-merge", "a rebase"),
    ("rebase-apply", "a rebase"),
    ("MERGE_HEAD", "a merge"),
    ("CHERRY_PICK_HEAD", "a cherry-pick"),
    ("REVERT_HEAD", "a revert"),
)


class NoWorktree(GitError):
    """The conversation has no worktree (never had one, or it was merged or discarded)."""


class WorktreeDeleted(GitError):
    """The conversation's worktree directory was deleted by hand; its branch may still hold
    its commits. It is not recreated silently: the person decides (`tailagent discard`)."""


class WorktreeTampered(GitError):
    """The worktree's `.git` no longer names the git dir git made for it (the agent may
    write it): git is not let follow it, and nothing is committed until it is put back or
    the conversation discarded."""

    def __init__(self, path: Path, git_dir: Path) -> None:
        super().__init__(
            f"the .git of the worktree {path} was changed: it no longer names {git_dir}, "
            "the git dir git made for it, and tailagent's git does not follow it, so nothing "
            f"there is committed or merged until a .git reading `gitdir: {git_dir}` is put "
            "back (or the conversation is discarded)"
        )


class NoRecord(GitError):
    """A directory git keeps no worktree record of: not one of this repository's."""


class MergeRefused(GitError):
    """A merge was refused and nothing was changed; str() says why and what to do."""


class MergeConflict(MergeRefused):
    """The conversation's branch conflicts with its base. Nothing was changed; `paths` are
    the conflicting files and `follow_up` is the request to send the agent."""

    def __init__(self, message: str, paths: list[str], follow_up: str) -> None:
        super().__init__(message)
        self.paths = paths
        self.follow_up = follow_up


@dataclass(frozen=True)
class Worktree:
    """A conversation's worktree, as its record says."""

    context_id: str
    path: Path
    branch: str
    base_branch: str
    base_commit: str
    created: str
    # A conversation whose turns changed nothing: its branch is gone (none is left behind
    # for a "hello"), its worktree waits detached, and its next turn makes the branch again.
    idle: bool = False


@dataclass(frozen=True)
class Merged:
    """Where a conversation's branch went when it was merged."""

    context_id: str
    branch: str
    base_branch: str
    commit: str
    strategy: str
    at: str


@dataclass(frozen=True)
class WorktreeStatus:
    """Where a conversation's branch stands against its base branch's current tip."""

    branch: str
    base_branch: str
    ahead: int
    behind: int
    files: list[str]


@dataclass(frozen=True)
class MergeResult:
    """A merge that happened: `commit` is the base branch's new tip."""

    commit: str
    strategy: Strategy
    base_branch: str
    removed: bool


@dataclass(frozen=True)
class DiscardResult:
    """What discarding a conversation loses (or lost): commits no other branch or tag
    holds ("<short sha> <subject>") and files changed but never committed."""

    commits_lost: list[str]
    files_uncommitted: list[str]


@dataclass(frozen=True)
class _Checkout:
    path: Path
    branch: str | None  # full ref name, None when detached (or bare)


def _in_progress(git_dir: Path) -> str | None:
    """The operation someone left half-done in this git dir ("a rebase", ...), if any."""
    for name, what in _IN_PROGRESS:
        if (git_dir / name).exists():
            return what
    return None


def _rebasing(common: Path, ref: str) -> Path | None:
    """The git dir (the main one or a linked worktree's) where `ref` is being rebased:
    git detaches HEAD meanwhile, so `worktree list` does not show the branch there."""
    for gitdir in [common, *sorted((common / "worktrees").glob("*"))]:
        for name in ("rebase-merge", "rebase-apply"):
            head_name = gitdir / name / "head-name"
            if head_name.is_file() and head_name.read_text().strip() == ref:
                return gitdir
    return None


def _git_dir_of(common: Path, path: Path) -> Path | None:
    """The git dir git made for the worktree at `path`: the entry of the repository's
    `worktrees/` whose `gitdir` file names `path/.git` (usually the one named after it;
    the name may be relative to the entry, as with `worktree.useRelativePaths`)."""
    link = os.path.normpath(path.resolve() / ".git")
    entries = common / "worktrees"
    for entry in [entries / path.name, *sorted(entries.glob("*"))]:
        try:
            named = (entry / "gitdir").read_text().strip()
        except OSError:
            continue
        if os.path.normpath(entry / named) == link:
            return entry
    return None


def _links_to(path: Path, git_dir: Path) -> bool:
    """Whether the worktree's `.git` is still the file git wrote: `gitdir: <git_dir>`."""
    dot_git = path / ".git"
    try:
        if not stat.S_ISREG(os.lstat(dot_git).st_mode):
            return False
        text = dot_git.read_text()
    except (OSError, UnicodeDecodeError):
        return False
    if not text.startswith("gitdir: "):
        return False
    named = path / text.removeprefix("gitdir: ").strip()
    return os.path.normpath(named) == os.path.normpath(git_dir)


def _relink(path: Path, git_dir: Path) -> None:
    """Writes the worktree's `.git` as git wrote it, so git will move and remove the
    worktree (it refuses one whose `.git` names another git dir): only on its way out."""
    dot_git = path / ".git"
    if dot_git.is_dir() and not dot_git.is_symlink():
        shutil.rmtree(dot_git)
    else:
        dot_git.unlink(missing_ok=True)
    dot_git.write_text(f"gitdir: {git_dir}\n")


def _make_root(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True, mode=0o700)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _is_file(path: Path) -> bool:
    return path.is_file()


def _is_dir(path: Path) -> bool:
    return path.is_dir()


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)


def _text(path: Path) -> str:
    return path.read_text()


def _resolved(path: Path) -> Path:
    return path.resolve()


def _split_z(text: str) -> list[str]:
    return [item for item in text.split("\0") if item]


def _status_paths(porcelain_z: str) -> list[str]:
    """The paths in `git status --porcelain -z` output (both sides of a rename)."""
    paths: list[str] = []
    items = porcelain_z.split("\0")
    index = 0
    while index < len(items):
        item = items[index]
        index += 1
        if len(item) < 4:
            continue
        paths.append(item[3:])
        if item[0] in "RC":
            if index < len(items) and items[index]:
                paths.append(items[index])
            index += 1
    return paths


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _listing(paths: list[str], limit: int = 10) -> str:
    shown = ", ".join(paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


def _fresh(
    context_id: str, path: Path, branch: str, base_branch: str, base_commit: str
) -> Worktree:
    """A worktree's record as of now."""
    created = datetime.now(UTC).isoformat(timespec="seconds")
    return Worktree(context_id, path, branch, base_branch, base_commit, created)


def _commit_message(subject: str, trailers: list[tuple[str, str]]) -> str:
    """A turn commit's message: its subject, then its trailers (a trailer just like the one
    before it only once, as git writes them). Written here rather than by `git commit
    --trailer`, which would also run any `trailer.<key>.cmd` a config names."""
    lines: list[str] = []
    for key, value in trailers:
        key = key.strip()
        if not _TRAILER_KEY.fullmatch(key):
            raise GitError(f"{key!r} cannot be a commit trailer's name")
        line = f"{key}: {one_line(value)}"
        if not lines or lines[-1] != line:
            lines.append(line)
    return "\n\n".join([turn_subject(subject), *(["\n".join(lines)] if lines else [])]) + "\n"


def turn_subject(text: str) -> str:
    """A commit subject from a prompt: its first non-blank line, blanks folded, at most
    72 characters (cut with an ellipsis), never empty."""
    for line in text.splitlines():
        line = one_line(line)
        if line:
            break
    else:
        return "tailagent turn"
    if len(line) > SUBJECT_LIMIT:
        line = line[: SUBJECT_LIMIT - 1].rstrip() + "…"
    return line


async def _toplevel(repo: Path) -> Path:
    result = await git(repo, "rev-parse", "--show-toplevel")
    return Path(result.out.strip())


async def probe(repo: Path) -> str | None:
    """None when `repo` can isolate conversations in worktrees; else the one-line reason
    it cannot (so the server can say why it runs shared).

    Isolation needs the top level of a non-bare work tree (a subdirectory would isolate
    its whole enclosing repository, which is rarely what was meant: think of a home
    directory kept in git) on a branch with at least one commit, with nobody's rebase or
    merge half-done in it (there is nothing clean to branch from or merge back into).
    """
    if not _is_dir(repo):
        return "not a git repository (no such directory)"
    try:
        result = await git(
            repo,
            "rev-parse",
            "--is-bare-repository",
            "--is-inside-work-tree",
            "--absolute-git-dir",
            ok=(0, 128),
        )
    except GitError as error:
        return str(error)
    if result.code != 0:
        if "not a git repository" in result.err:
            return "not a git repository"
        return f"git cannot use it: {one_line(result.err.removeprefix('fatal: '))}"
    lines = result.out.splitlines()
    if lines[0] == "true":
        return "a bare repository (no work tree to branch from)"
    if lines[1] != "true":
        return "not a git work tree (inside a .git directory)"
    top = await _toplevel(repo)
    if _resolved(top) != _resolved(repo):
        return f"a subdirectory of the git repository at {top} (isolation needs its top level)"
    doing = _in_progress(Path(lines[2]))
    if doing:
        return f"{doing} in progress in the repository (finish or abort it first)"
    head = await git(repo, "symbolic-ref", "-q", "HEAD", ok=(0, 1))
    if head.code != 0:
        return "detached HEAD (no branch to merge back into)"
    branch = head.out.strip()
    tip = await git(repo, "rev-parse", "--verify", "-q", f"{branch}^{{commit}}", ok=(0, 1))
    if tip.code != 0:
        return f"no commits yet on {branch.removeprefix('refs/heads/')} (nothing to branch from)"
    return None


class Worktrees:
    """The worktrees of one workspace repository's conversations.

    `root` is `<state dir>/worktrees`. `base` is the branch conversations start from and
    merge back into; None means the repository's current branch when each starts.
    Operations that change anything are serialized (one merge at a time, and no turn
    commit in the middle of one). `git_programs` lets tailagent's git run the hooks and
    filter and merge drivers the repository's config names (see git.py); off, none runs.
    """

    def __init__(
        self, repo: Path, root: Path, base: str | None = None, git_programs: bool = False
    ) -> None:
        self.repo = repo
        self.root = root
        self.base = base
        self.git_programs = git_programs
        self._lock = asyncio.Lock()
        self._main_repository: Repository | None = None
        self._common: str | None = None
        self._sweeper: asyncio.Task[None] | None = None
        # Worktrees made ahead and still being checked out: each future is done when it is.
        self._making: dict[Path, asyncio.Future[None]] = {}
        self._refreshing: set[asyncio.Task[None]] = set()

    # ---- records -----------------------------------------------------------------

    def _slug(self, context_id: str) -> str:
        if _SAFE_ID.fullmatch(context_id):
            return context_id
        return "x-" + hashlib.sha256(context_id.encode()).hexdigest()[:32]

    def _record_path(self, context_id: str) -> Path:
        return self.root / f"{self._slug(context_id)}.json"

    async def _main(self) -> Repository:
        """The workspace's own checkout, by the git dir and top level git found for it at
        the first look (the person's checkout: no agent writes there)."""
        if self._main_repository is None:
            found = await git(
                self.repo,
                "rev-parse",
                "--path-format=absolute",
                "--absolute-git-dir",
                "--git-common-dir",
                "--show-toplevel",
            )
            git_dir, common, top = found.out.splitlines()
            settings = NO_PROGRAMS + (() if self.git_programs else NO_HOOKS)
            self._common = str(_resolved(Path(common)))
            self._main_repository = Repository(Path(git_dir), Path(top), settings)
        return self._main_repository

    async def _common_dir(self) -> str:
        """The repository's shared git dir: what a record says it belongs to."""
        await self._main()
        assert self._common is not None
        return self._common

    async def _content(self, repository: Repository) -> Repository:
        """`repository` for commands that read or write files (a checkout, `add`, a
        merge): with its filter and merge drivers off, unless the person lets them run."""
        return repository if self.git_programs else await without_drivers(repository)

    async def _git_dir(self, path: Path) -> Path:
        """The git dir git made for the worktree at `path` (GitError if it made none)."""
        git_dir = _git_dir_of(Path(await self._common_dir()), path)
        if git_dir is None:
            raise NoRecord(
                f"{path} is not a git worktree of {self.repo}: git has no record of it; "
                "tailagent leaves it alone"
            )
        return git_dir

    async def _linked(self, path: Path, check: bool = True) -> Repository:
        """git for the worktree at `path` (see `_content`), by the git dir git made for it.
        Its `.git` must still name that git dir (unless not `check`ed: what a discard
        would lose is read from the right git dir anyway): a rewritten one raises
        WorktreeTampered, rather than git following it to another repository's config."""
        git_dir = await self._git_dir(path)
        if check and not _links_to(path, git_dir):
            raise WorktreeTampered(path, git_dir)
        return await self._content((await self._main()).linked(git_dir, path))

    async def _intact(self, path: Path) -> Repository | None:
        """git for the worktree at `path` if it is one of git's whose `.git` is as git
        wrote it; None if it is not (no record of it, or a `.git` rewritten)."""
        try:
            return await self._linked(path)
        except (WorktreeTampered, NoRecord):
            return None

    async def _load(self, context_id: str) -> Worktree | None:
        return await self._read(self._record_path(context_id), context_id)

    async def _read(self, path: Path, context_id: str) -> Worktree | None:
        """The record at `path`, checked to be tailagent's for `context_id` ("" for a
        worktree made ahead) in this repository; None when there is none."""
        try:
            data = json.loads(_text(path))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise GitError(
                f"the record {path} cannot be read ({error}): tailagent leaves its worktree "
                "alone until it is repaired or removed by hand"
            ) from None
        try:
            worktree = Worktree(
                context_id=data["context_id"],
                path=Path(data["path"]),
                branch=data["branch"],
                base_branch=data["base_branch"],
                base_commit=data["base_commit"],
                created=data["created"],
                idle=data.get("idle") is True,
            )
            repository = data["repository"]
        except (KeyError, TypeError):
            raise GitError(f"the record {path} is incomplete: remove it by hand") from None
        if (
            worktree.context_id != context_id
            or worktree.path.parent != self.root.resolve()
            or not worktree.branch.startswith(BRANCH_PREFIX)
        ):
            raise GitError(f"the record {path} does not match its conversation: left alone")
        if repository != await self._common_dir():
            raise GitError(
                f"conversation {context_id}'s worktree belongs to the repository at "
                f"{repository}, not {self.repo}: serve that workspace to use it"
            )
        return worktree

    def _save(self, worktree: Worktree, repository: str, record_path: Path | None = None) -> None:
        record = asdict(worktree) | {"path": str(worktree.path), "repository": repository}
        path = record_path or self._record_path(worktree.context_id)
        write_private(path, json.dumps(record, indent=2) + "\n")

    async def _require(self, context_id: str, present: bool = True) -> Worktree:
        worktree = await self._load(context_id)
        if worktree is None:
            raise NoWorktree(f"no worktree for conversation {context_id}")
        if present and not worktree.idle and not worktree.path.is_dir():
            raise WorktreeDeleted(
                f"the worktree of conversation {context_id} ({worktree.path}) was deleted by "
                f"hand; its branch {worktree.branch} is still there: run `tailagent discard "
                f"{context_id}` to drop it"
            )
        return worktree

    # ---- git helpers -------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _exclusive(self) -> AsyncIterator[None]:
        """One change at a time to this repository's conversations: within this process
        (an asyncio lock) and across processes sharing the state dir, such as the server
        and a `tailagent merge` run beside it (an advisory lock on `<root>/.lock`)."""
        async with self._lock:
            _make_root(self.root)
            fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                deadline = time.monotonic() + LOCK_WAIT
                while not _try_lock(fd):
                    if time.monotonic() > deadline:
                        raise GitError(
                            f"another tailagent process is changing the worktrees in "
                            f"{self.root}: try again when it is done"
                        )
                    await asyncio.sleep(0.05)
                yield
            finally:
                os.close(fd)  # closing drops the lock

    async def _ref_exists(self, ref: str) -> bool:
        result = await git(
            await self._main(), "rev-parse", "--verify", "-q", f"{ref}^{{commit}}", ok=(0, 1)
        )
        return result.code == 0

    async def _tip(self, branch: str) -> str:
        result = await git(
            await self._main(),
            "rev-parse",
            "--verify",
            "-q",
            f"refs/heads/{branch}^{{commit}}",
            ok=(0, 1),
        )
        if result.code != 0:
            raise GitError(f"the branch {branch} no longer exists in {self.repo}")
        return result.out.strip()

    async def _identity(self) -> list[str]:
        """`-c` options naming tailagent as author and committer where the repository
        (or the person's git config) names nobody: a commit must never fail for that."""
        found = await git(
            await self._main(), "config", "--get-regexp", r"^user\.(name|email)$", ok=(0, 1)
        )
        named = {k: v for k, _, v in (line.partition(" ") for line in found.out.splitlines())}
        options: list[str] = []
        for key, fallback in (("user.name", FALLBACK_NAME), ("user.email", FALLBACK_EMAIL)):
            if not named.get(key, "").strip():
                options += ["-c", f"{key}={fallback}"]
        return options

    async def _uncommitted(self, linked: Repository, refresh: bool = False) -> list[str]:
        """The files changed and not committed in a worktree. `refresh` lets git write the
        index's refreshed file times back (a status after a checkout is ~6x slower until
        then): only between turns, when the agent cannot be holding the index's lock.
        A submodule counts by the commit it is on: git is not run inside it (it would find
        its repository from a `.git` there, which the agent may have written)."""
        env = {"GIT_OPTIONAL_LOCKS": "1"} if refresh else None
        result = await git(
            linked,
            "status",
            "--porcelain",
            "-z",
            "--untracked-files=all",
            "--ignore-submodules=dirty",
            env=env,
        )
        return _unique(_status_paths(result.out))

    async def _checkouts(self) -> list[_Checkout]:
        result = await git(await self._main(), "worktree", "list", "--porcelain", "-z")
        checkouts: list[_Checkout] = []
        path: Path | None = None
        branch: str | None = None
        for item in result.out.split("\0"):
            if item.startswith("worktree "):
                path, branch = Path(item.removeprefix("worktree ")), None
            elif item.startswith("branch "):
                branch = item.removeprefix("branch ")
            elif item == "" and path is not None:
                checkouts.append(_Checkout(path, branch))
                path = None
        if path is not None:
            checkouts.append(_Checkout(path, branch))
        return checkouts

    async def _check_worktree(self, worktree: Worktree, linked: Repository) -> None:
        """Refuses to commit or merge from a worktree that is not on its branch or is in
        the middle of the agent's own rebase or merge."""
        doing = _in_progress(linked.git_dir)
        if doing:
            raise GitError(
                f"{doing} is in progress in conversation {worktree.context_id}'s worktree "
                f"({worktree.path}): ask the agent to finish or abort it"
            )
        head = await git(linked, "symbolic-ref", "-q", "HEAD", ok=(0, 1))
        if head.out.strip() != f"refs/heads/{worktree.branch}":
            where = head.out.strip().removeprefix("refs/heads/") or "a detached HEAD"
            raise GitError(
                f"conversation {worktree.context_id}'s worktree is on {where}, not on its "
                f"branch {worktree.branch}: ask the agent to `git switch {worktree.branch}`"
            )

    # ---- public ------------------------------------------------------------------

    def conversations(self, idle: bool = False) -> list[str]:
        """The conversations that hold a worktree and branch now, by their records (a
        worktree made ahead is nobody's yet), and with `idle` those whose turns changed
        nothing too. Records live in the state dir, where no agent writes."""
        found: list[str] = []
        for record in self.root.glob("*.json") if self.root.is_dir() else ():
            if record.name.startswith(READY_PREFIX):
                continue
            try:
                data = json.loads(record.read_text())
                context_id = data["context_id"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if data.get("idle") is True and not idle:
                continue
            if isinstance(context_id, str) and self._record_path(context_id) == record:
                found.append(context_id)
        return found

    def known(self) -> dict[str, str]:
        """Every conversation tailagent keeps something of here (a worktree, idle or not,
        or the record of its merge) -> the short name its branch has or had."""
        named = {context_id: "" for context_id in self.conversations(idle=True)}
        for context_id in named:
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                named[context_id] = json.loads(self._record_path(context_id).read_text())["branch"]
        merged = self.root / MERGED
        for record in merged.glob("*.json") if merged.is_dir() else ():
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                data = json.loads(record.read_text())
                if self._merged_path(data["context_id"]) == record:
                    named.setdefault(data["context_id"], data["branch"])
        return {c: str(b).removeprefix(BRANCH_PREFIX) for c, b in named.items()}

    def named(self, name: str) -> list[str]:
        """The conversations `name` can mean: those whose id starts with it, or whose
        branch is `tailagent/<name>` (the short id people see), `tailagent/` optional."""
        name = name.removeprefix(BRANCH_PREFIX)
        if not name:
            return []
        known = self.known()
        exact = [c for c, short in known.items() if short == name]
        return exact or sorted(c for c in known if c.startswith(name))

    def _merged_path(self, context_id: str) -> Path:
        return self.root / MERGED / f"{self._slug(context_id)}.json"

    def merged(self, context_id: str) -> Merged | None:
        """Where the conversation's last merge went, if it was merged here."""
        try:
            data = json.loads(self._merged_path(context_id).read_text())
            found = Merged(**{key: str(data[key]) for key in Merged.__dataclass_fields__})
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return found if found.context_id == context_id else None

    def _remember_merge(self, worktree: Worktree, result: MergeResult) -> None:
        at = datetime.now(UTC).isoformat(timespec="seconds")
        merged = Merged(worktree.context_id, worktree.branch, result.base_branch,
                        result.commit, result.strategy, at)  # fmt: skip
        (self.root / MERGED).mkdir(exist_ok=True, mode=0o700)
        write_private(self._merged_path(worktree.context_id), json.dumps(asdict(merged)) + "\n")

    def explained(self) -> bool:
        """Whether a start in this repository already said what worktree mode does here;
        marks it said (the state dir remembers it, so it is said once)."""
        mark = self.root / EXPLAINED
        repository = str(self.repo.resolve())
        try:
            said = mark.read_text().splitlines()
        except OSError:
            said = []
        if repository in said:
            return True
        _make_root(self.root)
        write_private(mark, "".join(f"{line}\n" for line in [*said, repository]))
        return False

    async def get(self, context_id: str) -> Worktree | None:
        """The conversation's worktree, or None when it has none."""
        return await self._load(context_id)

    async def ensure(self, context_id: str) -> Worktree:
        """The conversation's worktree: on its first call one made ahead (`prepare`),
        brought to the base branch's tip, or else one made now. When one is still being
        made ahead it is waited for: it is nearer done than a new one would be, and two
        checkouts at once only slow each other down.

        The record is written before `git worktree add`, so a crash in between leaves a
        record (which `discard` and `prune` clear) rather than an unmarked worktree that
        tailagent would then never dare to touch.
        """
        while True:
            async with self._exclusive():
                existing = await self._load(context_id)
                if existing is not None and existing.idle:
                    return await self._wake(existing)
                if existing is not None:
                    if existing.path.is_dir():
                        return existing
                    if await self._ref_exists(f"refs/heads/{existing.branch}"):
                        await self._require(context_id)  # raises WorktreeDeleted
                    # A record without its branch: a creation cut short. Nothing to lose;
                    # clear what git may have registered of it, then start again.
                    await self._remove(existing)
                base_branch = await self._base_branch(context_id)
                adopted = await self._adopt(context_id, base_branch)
                if adopted is not None:
                    return adopted
                making = list(self._making.values())
                if not making:
                    branch = await self._free_branch(context_id)
                    return await self._create(context_id, branch, base_branch)
            await asyncio.wait(making)

    async def release(self, context_id: str) -> bool:
        """After a turn that changed nothing: when the conversation's branch has nothing
        its base lacks and its worktree nothing uncommitted, the branch goes (a "hello"
        leaves none behind) and the worktree waits detached, idle, for the
        conversation's next turn: its agent session may still be working there. True
        when it was released."""
        async with self._exclusive():
            return await self._release(context_id)

    async def _release(self, context_id: str) -> bool:
        worktree = await self._load(context_id)
        if worktree is None or worktree.idle or not _is_dir(worktree.path):
            return False
        main = await self._main()
        branch, base = f"refs/heads/{worktree.branch}", f"refs/heads/{worktree.base_branch}"
        if not await self._ref_exists(branch) or not await self._ref_exists(base):
            return False
        ahead = await git(main, "rev-list", "--count", branch, "--not", base)
        if int(ahead.out) != 0:
            return False
        linked = await self._intact(worktree.path)
        if linked is None or _in_progress(linked.git_dir) or await self._uncommitted(linked):
            return False
        head = await git(linked, "symbolic-ref", "-q", "HEAD", ok=(0, 1))
        if head.out.strip() != branch:
            return False
        await git(linked, "update-ref", "--no-deref", "HEAD", await self._tip(worktree.branch))
        await git(main, "branch", "-D", worktree.branch)
        self._save(replace(worktree, idle=True), await self._common_dir())
        return True

    async def _wake(self, idle: Worktree) -> Worktree:
        """An idle conversation's next turn: its branch made again at the base's tip, in
        its own worktree (checked out again at the same path if a start removed it), so
        its agent session finds its directory where it was."""
        base_branch = await self._base_branch(idle.context_id)
        base_commit = await self._tip(base_branch)
        branch = await self._free_branch(idle.context_id)
        woken = _fresh(idle.context_id, idle.path, branch, base_branch, base_commit)
        record = self._record_path(idle.context_id)
        if not _is_dir(idle.path):
            self._save(woken, await self._common_dir())
            await self._check_out(woken, record)
            return woken
        linked = await self._linked(idle.path)
        if await self._uncommitted(linked):  # written meanwhile: kept, the branch starts here
            base_commit = (await git(linked, "rev-parse", "HEAD")).out.strip()
            woken = replace(woken, base_commit=base_commit)
        else:
            await git(await self._content(linked), "reset", "-q", "--hard", base_commit)
        await git(await self._main(), "branch", branch, base_commit)
        await git(linked, "symbolic-ref", "HEAD", f"refs/heads/{branch}")
        self._save(woken, await self._common_dir())
        return woken

    async def prepare(self) -> Path:
        """Makes a worktree ahead of the conversation that will take it (the next new
        one), so that conversation does not wait for a checkout; returns its path, where
        an agent may be started ahead too.

        The checkout runs outside the lock (it takes 0.2 s to seconds on a big repository
        and a busy disk, and turns ending meanwhile must not wait for it): until it is
        done the worktree is not offered. Its index is refreshed a moment later, so the
        first turns' `git status` need not read every file."""
        async with self._exclusive():
            slug = READY_PREFIX + secrets.token_hex(6)
            base_branch = await self._base_branch("the next conversation")
            worktree, record = await self._record_new("", BRANCH_PREFIX + slug, base_branch, slug)
            made = self._making[worktree.path] = asyncio.get_running_loop().create_future()
        try:
            await self._check_out(worktree, record, detach=True)
        finally:
            del self._making[worktree.path]
            made.set_result(None)
        refresh = asyncio.create_task(self._refresh(worktree.path, record))
        self._refreshing.add(refresh)
        refresh.add_done_callback(self._refreshing.discard)
        return worktree.path

    async def _refresh(self, path: Path, record: Path) -> None:
        """Rewrites a new worktree's index once its files' times are in the past, so
        `git status` there compares times instead of reading every file."""
        await asyncio.sleep(RACY_SECONDS)
        async with self._exclusive():
            if _is_file(record) and _is_dir(path):  # not taken away meanwhile
                try:
                    linked = await self._linked(path)
                except GitError as error:  # it is not given to anyone then (`_adopt`)
                    log.warning("the worktree made ahead %s: %s", path, error)
                    return
                await git(linked, "update-index", "-q", "--refresh", ok=(0, 1))

    def ready(self) -> list[Path]:
        """The worktrees made ahead and not yet taken, oldest (next to be taken) first."""
        if not self.root.is_dir():
            return []
        records = sorted(
            self.root.glob(READY_PREFIX + "*.json"), key=lambda r: r.stat().st_mtime_ns
        )
        paths = [self.root.resolve() / record.stem for record in records]
        return [path for path in paths if path not in self._making]

    def _ready_record(self, path: Path) -> Path:
        return self.root / f"{path.name}.json"

    async def _adopt(self, context_id: str, base_branch: str) -> Worktree | None:
        """Gives the conversation the oldest worktree made ahead: moved to the base tip
        if the base went on meanwhile, its branch renamed for the conversation. One that
        is no longer clean or whole is removed and the next tried."""
        base_commit = await self._tip(base_branch)
        for path in self.ready():
            record = self._ready_record(path)
            try:
                ready = await self._read(record, "")
                if ready is None:
                    continue
                linked = await self._intact(path) if path.is_dir() else None
                if linked is None or await self._uncommitted(linked):
                    await self._remove(ready, record)
                    continue
                if (await git(linked, "rev-parse", "HEAD")).out.strip() != base_commit:
                    await git(linked, "reset", "-q", "--hard", base_commit)
            except GitError as error:
                log.warning("a worktree made ahead (%s) is not usable: %s", path, error)
                continue
            branch = await self._free_branch(context_id)
            # Made detached (no branch for `git branch` to show before it is anyone's):
            # the conversation's branch starts here, and the worktree moves onto it.
            await git(await self._main(), "branch", branch, base_commit)
            await git(linked, "symbolic-ref", "HEAD", f"refs/heads/{branch}")
            adopted = _fresh(context_id, path, branch, base_branch, base_commit)
            self._save(adopted, await self._common_dir())
            record.unlink()
            return adopted
        return None

    async def _base_branch(self, purpose: str) -> str:
        """The branch a new worktree starts from: `base`, or the workspace's current one."""
        if self.base is None:
            reason = await probe(self.repo)
            if reason is not None:
                raise GitError(f"cannot give {purpose} a worktree: {reason}")
            head = await git(await self._main(), "symbolic-ref", "-q", "--short", "HEAD")
            return head.out.strip()
        if not await self._ref_exists(f"refs/heads/{self.base}"):
            raise GitError(
                f"the base branch {self.base} does not exist in {self.repo}: "
                "create it or change workspace.base"
            )
        return self.base

    async def _create(self, context_id: str, branch: str, base_branch: str) -> Worktree:
        worktree, record = await self._record_new(context_id, branch, base_branch)
        await self._check_out(worktree, record)
        return worktree

    async def _record_new(
        self, context_id: str, branch: str, base_branch: str, slug: str | None = None
    ) -> tuple[Worktree, Path]:
        """A new worktree's record, written before the worktree exists (so a crash leaves
        a record, never an unmarked worktree); the record's path."""
        base_commit = await self._tip(base_branch)
        path = self.root.resolve() / (slug or self._slug(context_id))
        if path.exists():
            raise GitError(
                f"{path} exists but tailagent has no record of it: move it away to let "
                f"conversation {context_id} have a worktree"
            )
        worktree = _fresh(context_id, path, branch, base_branch, base_commit)
        record = self._ready_record(path) if slug else self._record_path(context_id)
        self._save(worktree, await self._common_dir(), record)
        return worktree, record

    async def _check_out(self, worktree: Worktree, record: Path, detach: bool = False) -> None:
        """`git worktree add`: on the worktree's new branch, or `detach`ed (one made ahead,
        whose branch is made when a conversation takes it)."""
        path = worktree.path
        on = ["--detach"] if detach else ["-b", worktree.branch]
        try:
            main = await self._content(await self._main())
            await git(main, "worktree", "add", "-q", *on, str(path), worktree.base_commit)
        except BaseException:
            # Git undoes a failed `worktree add`, but not one where only the person's
            # post-checkout hook failed: then the worktree is there, and the record stays
            # so that it is known as tailagent's (and discard or prune can remove it).
            if not _is_dir(path):
                _unlink(record)
            raise

    async def _free_branch(self, context_id: str) -> str:
        """`tailagent/<first 8 characters>`, or a longer or numbered name when another
        branch has it already (context ids need not be random)."""
        clean = re.sub(r"[^A-Za-z0-9_-]", "-", context_id) or "conversation"
        candidates = [clean[:8], clean[:40]] + [f"{clean[:40]}-{n}" for n in range(2, 100)]
        for short in _unique(candidates):
            branch = BRANCH_PREFIX + short
            if not await self._ref_exists(f"refs/heads/{branch}"):
                return branch
        raise GitError(f"no free branch name for conversation {context_id}")

    async def commit_turn(
        self, context_id: str, subject: str, trailers: list[tuple[str, str]]
    ) -> str | None:
        """Commits everything the turn changed in the conversation's worktree (tracked or
        not, .gitignore respected) with `subject` and `trailers` (who asked, who allowed
        what, the task and context), so `git log` says who is behind every change.

        Returns the commit's sha, or None when nothing changed; WorktreeTampered (nothing
        committed) when the worktree's `.git` was changed. The agent's own commits stay as
        they are. No hooks run (unless `git_programs`), pre-commit and commit-msg never
        (`--no-verify`), and the commit is not signed: this is a checkpoint on tailagent's
        own branch, not the person's commit (a failing linter hook must not stop the
        record of who asked for what); what lands on the person's branch is decided when
        they merge it.
        """
        async with self._exclusive():
            worktree = await self._require(context_id)
            linked = await self._linked(worktree.path)
            if not await self._uncommitted(linked, refresh=True):
                return None
            await self._check_worktree(worktree, linked)
            message = _commit_message(subject, trailers)
            await git(linked, "add", "-A")
            await git(
                linked,
                *await self._identity(),
                "commit",
                "-q",
                "--no-verify",
                "--no-gpg-sign",
                "--cleanup=whitespace",
                "-F",
                "-",
                input=message,
            )
            head = await git(linked, "rev-parse", "HEAD")
            return head.out.strip()

    async def status(self, context_id: str) -> WorktreeStatus:
        """Commits ahead of and behind the base branch's current tip, and the files changed
        on the branch since it left the base plus those changed but not yet committed."""
        worktree = await self._require(context_id)
        if worktree.idle:
            return WorktreeStatus(worktree.branch, worktree.base_branch, 0, 0, [])
        linked = await self._linked(worktree.path)
        main = await self._main()
        base_tip = await self._tip(worktree.base_branch)
        tip = await self._tip(worktree.branch)
        counts = await git(main, "rev-list", "--left-right", "--count", f"{tip}...{base_tip}")
        ahead, behind = (int(n) for n in counts.out.split())
        merge_base = await git(main, "merge-base", base_tip, tip)
        changed = await git(
            main, "diff", "--name-only", "-z", "--no-renames", merge_base.out.strip(), tip
        )
        files = _split_z(changed.out) + await self._uncommitted(linked)
        return WorktreeStatus(
            branch=worktree.branch,
            base_branch=worktree.base_branch,
            ahead=ahead,
            behind=behind,
            files=sorted(set(files)),
        )

    async def diff(self, context_id: str) -> str:
        """The whole conversation as a patch against where it left its base, followed,
        under a line of its own, by what is changed in the worktree but not committed.

        The uncommitted part is built in a throwaway index, so the worktree's own index
        (which the agent may be using) is left as it is. No diff driver of a config runs
        (`--no-ext-diff`, `--no-textconv`): the agent's `.gitattributes` could pick one.
        """
        worktree = await self._require(context_id)
        if worktree.idle:
            return ""
        linked = await self._linked(worktree.path)
        main = await self._main()
        tip = await self._tip(worktree.branch)
        base_tip = await self._tip(worktree.base_branch)
        merge_base = (await git(main, "merge-base", base_tip, tip)).out.strip()
        options = ("--no-color", "--no-ext-diff", "--no-textconv", "--binary")
        committed = await git(main, "diff", *options, merge_base, tip)
        text = committed.out
        if await self._uncommitted(linked):
            index = linked.git_dir / f"tailagent-diff-index-{secrets.token_hex(4)}"
            env = {"GIT_INDEX_FILE": str(index)}
            try:
                await git(linked, "read-tree", "HEAD", env=env)
                await git(linked, "add", "-A", env=env)
                pending = await git(linked, "diff", *options, "--cached", "HEAD", env=env)
            finally:
                index.unlink(missing_ok=True)
            text += (
                f"\n# Not committed yet (changes in {worktree.path} since the last turn's "
                "commit):\n\n" + pending.out
            )
        return text

    async def would_lose(self, context_id: str) -> DiscardResult:
        """What `discard` would lose, so it can be said before anything is removed."""
        worktree = await self._require(context_id, present=False)
        return await self._losses(worktree)

    async def _losses(self, worktree: Worktree) -> DiscardResult:
        commits: list[str] = []
        if await self._ref_exists(f"refs/heads/{worktree.branch}"):
            result = await git(
                await self._main(),
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
        files = []
        if worktree.path.is_dir():
            files = await self._uncommitted(await self._linked(worktree.path, check=False))
        return DiscardResult(commits_lost=commits, files_uncommitted=files)

    async def discard(self, context_id: str) -> DiscardResult:
        """Removes the conversation's worktree, branch and record; returns what was lost.
        Also the way out for a worktree whose directory was deleted by hand."""
        async with self._exclusive():
            worktree = await self._require(context_id, present=False)
            lost = await self._losses(worktree)
            await self._remove(worktree)
            return lost

    async def prune(self, live: set[str]) -> list[str]:
        """Removes the worktrees, branches and records of tailagent's conversations not in
        `live` (those that no longer exist); returns their context ids. Only what a record
        names as tailagent's (`tailagent/` branch, worktree under `root`, this repository)
        is touched: a record that does not add up is left alone and logged."""
        pruned: list[str] = []
        if not self.root.is_dir():
            return pruned
        self.sweep()  # what a stop left in .trash
        async with self._exclusive():
            await self._check_ready()
            self._forget_merges(live)
            elsewhere: dict[str, int] = {}
            for record in sorted(self.root.glob("*.json")):
                if record.name.startswith(READY_PREFIX):
                    continue
                try:
                    data = json.loads(record.read_text())
                    context_id = data["context_id"]
                    if not isinstance(context_id, str):
                        continue
                    if self._record_path(context_id) != record:
                        raise GitError(f"the record {record} does not match its name")
                    if data.get("repository") != await self._common_dir():
                        if data.get("idle") is not True:  # an idle one holds nothing
                            repository = str(data.get("repository"))
                            elsewhere[repository] = elsewhere.get(repository, 0) + 1
                        continue
                    if context_id in live:
                        await self._shelve(context_id)
                        continue
                    worktree = await self._require(context_id, present=False)
                    lost = await self._losses(worktree)
                    await self._remove(worktree)
                except (GitError, OSError, ValueError, KeyError, TypeError) as error:
                    log.warning("worktree record %s not pruned: %s", record, error)
                    continue
                if lost.commits_lost or lost.files_uncommitted:
                    log.warning(
                        "pruned conversation %s's worktree, losing %d commits and %d "
                        "uncommitted files",
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
            f"{count} conversation{'s' if count > 1 else ''} with a branch in the "
            f"repository at {repository} (served before from this state dir): left alone "
            f"while {self.repo} is served; serve that workspace (--cwd) to merge or "
            "discard them"
            for repository, count in sorted(elsewhere.items())
        ]
        mark = self.root / ".elsewhere"
        try:
            if mark.read_text() == "".join(f"{line}\n" for line in lines):
                return
        except OSError:
            pass
        for line in lines:
            log.info("%s", line)
        write_private(mark, "".join(f"{line}\n" for line in lines))

    async def _shelve(self, context_id: str) -> None:
        """At a start, the worktree of a conversation that changed nothing goes (no agent
        session is in it yet; a branch left by an older tailagent goes too); its record
        stays, so its next turn checks it out again at the same path."""
        await self._release(context_id)
        worktree = await self._require(context_id, present=False)
        if not worktree.idle or not _is_dir(worktree.path):
            return
        linked = await self._intact(worktree.path)
        if linked is not None and not await self._uncommitted(linked):
            await self._retire(worktree.path)

    def _forget_merges(self, live: set[str]) -> None:
        """The records of merges of conversations that no longer exist."""
        merged = self.root / MERGED
        for record in merged.glob("*.json") if merged.is_dir() else ():
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                if json.loads(record.read_text())["context_id"] not in live:
                    record.unlink()

    async def _check_ready(self) -> None:
        """Keeps the worktrees made ahead that are whole (a restart need not make them
        again). A creation cut short is removed; one whose path a conversation's record
        names is the rest of an adoption cut short: only its record goes."""
        claimed = set()
        for record in self.root.glob("*.json"):
            if not record.name.startswith(READY_PREFIX):
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                    claimed.add(json.loads(record.read_text())["path"])
        for path in self.ready():
            record = self._ready_record(path)
            try:
                if await self._drop_foreign(path, record):
                    continue
                ready = await self._read(record, "")
                if ready is None:
                    continue
                if str(path) in claimed:
                    record.unlink()
                elif not path.is_dir():
                    await self._remove(ready, record)
            except GitError as error:
                log.warning("worktree made ahead %s left alone: %s", path, error)

    async def _drop_foreign(self, path: Path, record: Path) -> bool:
        """Removes a worktree made ahead for another repository (the state dir served
        another --cwd before): it is nobody's, and would otherwise stay for good. True
        when the record was another repository's."""
        try:
            data = json.loads(_text(record))
            repository = Path(data["repository"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if str(repository) == await self._common_dir():
            return False
        if Path(data.get("path", "")) != path or path.parent != self.root.resolve():
            return False
        if _is_dir(repository / "worktrees"):  # that repository's record of it goes too
            other = Repository(repository, repository.parent, NO_PROGRAMS + NO_HOOKS)
            await git(other, "worktree", "remove", "--force", str(path), ok=(0, 128))
        if _is_dir(path):
            await asyncio.to_thread(shutil.rmtree, path, ignore_errors=True)
        _unlink(record)
        log.info("removed a worktree made ahead for the repository at %s, which this state "
                 "dir served before: %s is served now", repository, self.repo)  # fmt: skip
        return True

    async def _remove(self, worktree: Worktree, record: Path | None = None) -> None:
        """Removes exactly this worktree (by its path), its branch and then its record,
        the record last so an interrupted removal can be finished by discard or prune."""
        registered = {c.path.resolve() for c in await self._checkouts()}
        if worktree.path.resolve() in registered:
            await self._retire(worktree.path)
        elif worktree.path.exists():
            raise GitError(
                f"{worktree.path} is not a git worktree of {self.repo}: left alone; remove "
                "it by hand if it is not needed"
            )
        if await self._ref_exists(f"refs/heads/{worktree.branch}"):
            await git(await self._main(), "branch", "-D", worktree.branch)
        (record or self._record_path(worktree.context_id)).unlink(missing_ok=True)

    async def _retire(self, path: Path) -> None:
        """Takes a worktree out of use at once: moved into `<root>/.trash` and detached
        from its branch (which can then go). Deleting its files, most of a second for
        10,000, happens in the background and outside the lock, so the next conversation
        does not wait behind it; what a crash leaves in `.trash` is swept at the next start.
        """
        trash = self.root / TRASH
        trash.mkdir(exist_ok=True, mode=0o700)
        target = trash / f"{path.name}-{secrets.token_hex(3)}"
        git_dir = await self._git_dir(path)
        if _is_dir(path) and not _links_to(path, git_dir):
            _relink(path, git_dir)
        main = await self._main()
        moved = await git(main, "worktree", "move", str(path), str(target), ok=(0, 128))
        if moved.code != 0:  # git does not move a worktree holding submodules
            await git(main, "worktree", "remove", "--force", str(path))
            return
        retired = main.linked(git_dir, target)
        head = await git(retired, "rev-parse", "HEAD")
        await git(retired, "update-ref", "--no-deref", "HEAD", head.out.strip())
        self.sweep()

    def sweep(self) -> None:
        """Deletes retired worktrees (`<root>/.trash`) in the background."""
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep(), name="worktree sweeper")

    async def _sweep(self) -> None:
        trash = self.root / TRASH
        tried: set[Path] = set()
        while trash.is_dir() and (waiting := sorted(set(trash.iterdir()) - tried)):
            for item in waiting:
                tried.add(item)
                try:
                    main = await self._main()
                    await git(main, "worktree", "remove", "--force", str(item), ok=(0, 128))
                except GitError as error:
                    log.warning("could not remove the retired worktree %s: %s", item, error)
                if item.exists():  # no longer (or never) registered with git
                    await asyncio.to_thread(shutil.rmtree, item, ignore_errors=True)

    async def aclose(self) -> None:
        """Waits for retired worktrees to be deleted (a stop mid-way is finished later)."""
        for refresh in list(self._refreshing):
            refresh.cancel()
            with contextlib.suppress(BaseException):
                await refresh
        if self._sweeper is not None:
            with contextlib.suppress(Exception):
                await self._sweeper

    # ---- merge -------------------------------------------------------------------

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
        async with self._exclusive():
            worktree = await self._require(context_id)
            if worktree.idle:
                raise MergeRefused(
                    f"nothing to merge: conversation {context_id} has changed nothing "
                    f"(its branch {worktree.branch} is made again at its next turn)"
                )
            linked = await self._linked(worktree.path)
            await self._check_worktree(worktree, linked)
            pending = await self._uncommitted(linked)
            if pending:
                raise MergeRefused(
                    f"conversation {context_id}'s worktree has changes not committed yet "
                    f"({_listing(pending)}): send the agent another turn (its changes are "
                    "committed when it ends), then merge again"
                )
            base = worktree.base_branch
            base_tip = await self._tip(base)
            tip = await self._tip(worktree.branch)
            main = await self._main()
            ahead = await git(main, "rev-list", "--count", f"{base_tip}..{tip}")
            if int(ahead.out) == 0:
                raise MergeRefused(
                    f"nothing to merge: {worktree.branch} has no commits that {base} lacks"
                )
            checkout = await self._base_checkout(base)
            merged = await self._merged_tree(worktree, base_tip, tip)
            base_tree = await git(main, "rev-parse", f"{base_tip}^{{tree}}")
            if strategy == "squash" and merged == base_tree.out.strip():
                raise MergeRefused(
                    f"nothing to merge: {base} already has every change on {worktree.branch}"
                )
            identity = await self._identity()
            if strategy == "rebase":
                new = await self._rebase(worktree, linked, base_tip, tip, identity)
            else:
                message = await self._message(worktree, strategy, base_tip, tip)
                parents = ["-p", base_tip] + (["-p", tip] if strategy == "merge" else [])
                made = await git(
                    main, *identity, "commit-tree", merged, *parents, "-F", "-", input=message
                )
                new = made.out.strip()
            try:
                await self._advance(worktree, checkout, base_tip, new, strategy)
            except BaseException:
                if strategy == "rebase":
                    # Put the conversation's branch back where it was (its worktree was
                    # clean, so nothing else is there to lose).
                    await git(linked, "reset", "-q", "--hard", tip)
                raise
            self._remember_merge(worktree, MergeResult(new, strategy, base, False))
            removed = False
            if not keep:
                try:
                    await self._remove(worktree)
                    removed = True
                except GitError as error:
                    log.warning(
                        "merged conversation %s but kept its worktree: %s", context_id, error
                    )
            return MergeResult(commit=new, strategy=strategy, base_branch=base, removed=removed)

    async def _base_checkout(self, base: str) -> Path | None:
        """Where the base branch is checked out: the workspace's own checkout (then it must
        be clean), or nowhere (None). Anywhere else is refused: that worktree's files would
        silently fall behind its branch. So is a base someone is rebasing."""
        main = await self._main()
        top = main.work_tree.resolve()
        ref = f"refs/heads/{base}"
        found: Path | None = None
        for checkout in await self._checkouts():
            if checkout.branch != ref:
                continue
            if checkout.path.resolve() != top:
                raise MergeRefused(
                    f"{base} is checked out in another worktree, {checkout.path}: merge there "
                    f"or switch that worktree to another branch, then merge again"
                )
            found = top
        rebasing = _rebasing(Path(await self._common_dir()), ref)
        if rebasing is not None:
            raise MergeRefused(
                f"someone is rebasing {base} ({rebasing}): finish or abort that rebase, "
                "then merge again"
            )
        if found is not None:
            doing = _in_progress(main.git_dir)
            if doing:
                raise MergeRefused(
                    f"{doing} is in progress in {found}: finish or abort it, then merge again"
                )
            dirty = await git(
                await self._content(main), "status", "--porcelain", "-z", "--untracked-files=no"
            )
            files = _unique(_status_paths(dirty.out))
            if files:
                raise MergeRefused(
                    f"{base} is checked out in {found} with uncommitted changes "
                    f"({_listing(files)}): commit or stash them yourself, then merge again"
                )
        return found

    async def _merged_tree(self, worktree: Worktree, base_tip: str, tip: str) -> str:
        """The tree of base + branch, written to the object store only (no checkout or
        index is touched); MergeConflict when they conflict."""
        result = await git(
            await self._content(await self._main()),
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
        raise self._conflict(worktree, _unique([p for p in items[1:] if p]))

    def _conflict(self, worktree: Worktree, paths: list[str]) -> MergeConflict:
        base = worktree.base_branch
        follow_up = (
            f"rebase your branch onto {base} and resolve the conflicts in {_listing(paths, 20)}"
        )
        return MergeConflict(
            f"{worktree.branch} conflicts with {base} in {_listing(paths)}; nothing was "
            f'changed. To resolve it, ask the agent: "{follow_up}"',
            paths,
            follow_up,
        )

    async def _message(
        self, worktree: Worktree, strategy: Strategy, base_tip: str, tip: str
    ) -> str:
        log_lines = await git(
            await self._main(),
            "log",
            "--reverse",
            "--no-merges",
            "-z",
            "--format=%s%x1f%(trailers:only,unfold)",
            f"{base_tip}..{tip}",
        )
        subjects: list[str] = []
        trailers: list[str] = []
        for entry in _split_z(log_lines.out):
            subject, _, block = entry.partition("\x1f")
            subjects.append(subject.strip())
            trailers += [line.strip() for line in block.splitlines() if line.strip()]
        trailers = _unique(trailers)
        if strategy == "merge":
            head = f"Merge branch '{worktree.branch}' into {worktree.base_branch}"
        else:
            head = "tailagent: " + (
                subjects[0] if subjects else f"conversation {worktree.context_id}"
            )
            if len(head) > SUBJECT_LIMIT:
                head = head[: SUBJECT_LIMIT - 1].rstrip() + "…"
        parts = [head]
        if subjects:
            parts.append("\n".join(f"- {subject}" for subject in subjects))
        if trailers:
            parts.append("\n".join(trailers))
        return "\n\n".join(parts) + "\n"

    async def _rebase(
        self,
        worktree: Worktree,
        linked: Repository,
        base_tip: str,
        tip: str,
        identity: list[str],
    ) -> str:
        """Replays the branch onto the base tip in the conversation's own worktree; on a
        conflict aborts (the worktree is as it was) and raises MergeConflict."""
        result = await git(
            linked,
            *identity,
            "-c",
            "rebase.autoStash=false",
            "rebase",
            "-q",
            "--no-autosquash",
            "--no-update-refs",
            "--no-verify",
            base_tip,
            ok=(0, 1),
        )
        if result.code != 0:
            conflicted = await git(linked, "diff", "--name-only", "-z", "--diff-filter=U")
            await git(linked, "rebase", "--abort")
            paths = _unique(_split_z(conflicted.out))
            if not paths:
                raise MergeRefused(
                    f"rebasing {worktree.branch} onto {worktree.base_branch} failed and was "
                    f"undone: {one_line(result.err or result.out)}"
                )
            raise self._conflict(worktree, paths)
        new = (await git(linked, "rev-parse", "HEAD")).out.strip()
        if new == base_tip:
            await git(linked, "reset", "-q", "--hard", tip)
            raise MergeRefused(
                f"nothing to merge: {worktree.base_branch} already has every change on "
                f"{worktree.branch}"
            )
        return new

    async def _advance(
        self,
        worktree: Worktree,
        checkout: Path | None,
        old: str,
        new: str,
        strategy: Strategy,
    ) -> None:
        """Moves the base branch from `old` to `new`: in its (clean) checkout by a
        fast-forward, which git itself refuses rather than overwrite a file; elsewhere by
        a compare-and-swap of the ref, refused if someone moved it meanwhile."""
        base = worktree.base_branch
        moved = MergeRefused(
            f"{base} moved while merging {worktree.branch}; nothing was changed: merge again"
        )
        main = await self._main()
        if checkout is not None:
            result = await git(
                await self._content(main),
                "merge",
                "-q",
                "--ff-only",
                "--no-autostash",
                new,
                ok=(0, 1, 128),
            )
            if result.code != 0:
                files = [line.strip() for line in result.err.splitlines() if line.startswith("\t")]
                if files:
                    raise MergeRefused(
                        f"merging into {base} would overwrite files in {checkout} that are "
                        f"not committed ({_listing(files)}); nothing was changed: move or "
                        "commit them, then merge again"
                    )
                if "fast-forward" in result.err.lower():
                    raise moved
                raise MergeRefused(
                    f"updating {base} in {checkout} failed; nothing was changed: "
                    f"{one_line(result.err)}"
                )
            return
        result = await git(
            main,
            "update-ref",
            "-m",
            f"tailagent: {strategy} {worktree.branch}",
            f"refs/heads/{base}",
            new,
            old,
            ok=(0, 1, 128),
        )
        if result.code != 0:
            raise moved
