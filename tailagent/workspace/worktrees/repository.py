"""git for the workspace and its conversations' worktrees, each named outright.

Every concern runs git through this one object, so how a repository is named (the person's
checkout found once from its directory, a worktree only by the git dir git made for it),
which programs git may start (`git_programs`) and who commits when nobody is configured
are decided in one place: a new way of running git (issue 24) changes this file only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tailagent.workspace.git import (
    NO_HOOKS,
    NO_PROGRAMS,
    GitError,
    Repository,
    git,
    without_drivers,
)
from tailagent.workspace.worktrees.errors import NoRecord, WorktreeTampered
from tailagent.workspace.worktrees.fs import resolved
from tailagent.workspace.worktrees.gitdirs import git_dir_of, links_to
from tailagent.workspace.worktrees.porcelain import status_paths, unique

FALLBACK_NAME = "tailagent"
FALLBACK_EMAIL = "tailagent@localhost"


@dataclass(frozen=True)
class Checkout:
    """A checkout git lists for the repository (`git worktree list`)."""

    path: Path
    branch: str | None  # full ref name, None when detached (or bare)


class WorkspaceRepo:
    """The workspace repository at `repo`; `git_programs` lets its git run the hooks and
    filter and merge drivers the repository's config names (see git.py)."""

    def __init__(self, repo: Path, git_programs: bool = False) -> None:
        self.repo = repo
        self.git_programs = git_programs
        self._main_repository: Repository | None = None
        self._common: str | None = None

    async def main(self) -> Repository:
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
            self._common = str(resolved(Path(common)))
            self._main_repository = Repository(Path(git_dir), Path(top), settings)
        return self._main_repository

    async def common_dir(self) -> str:
        """The repository's shared git dir: what a record says it belongs to."""
        await self.main()
        assert self._common is not None
        return self._common

    async def content(self, repository: Repository) -> Repository:
        """`repository` for commands that read or write files (a checkout, `add`, a
        merge): with its filter and merge drivers off, unless the person lets them run."""
        return repository if self.git_programs else await without_drivers(repository)

    async def git_dir(self, path: Path) -> Path:
        """The git dir git made for the worktree at `path` (GitError if it made none)."""
        git_dir = git_dir_of(Path(await self.common_dir()), path)
        if git_dir is None:
            raise NoRecord(
                f"{path} is not a git worktree of {self.repo}: git has no record of it; "
                "tailagent leaves it alone"
            )
        return git_dir

    async def linked(self, path: Path, check: bool = True) -> Repository:
        """git for the worktree at `path` (see `content`), by the git dir git made for it.
        Its `.git` must still name that git dir (unless not `check`ed: what a discard
        would lose is read from the right git dir anyway): a rewritten one raises
        WorktreeTampered, rather than git following it to another repository's config."""
        git_dir = await self.git_dir(path)
        if check and not links_to(path, git_dir):
            raise WorktreeTampered(path, git_dir)
        return await self.content((await self.main()).linked(git_dir, path))

    async def intact(self, path: Path) -> Repository | None:
        """git for the worktree at `path` if it is one of git's whose `.git` is as git
        wrote it; None if it is not (no record of it, or a `.git` rewritten)."""
        try:
            return await self.linked(path)
        except (WorktreeTampered, NoRecord):
            return None

    async def ref_exists(self, ref: str) -> bool:
        result = await git(
            await self.main(), "rev-parse", "--verify", "-q", f"{ref}^{{commit}}", ok=(0, 1)
        )
        return result.code == 0

    async def tip(self, branch: str) -> str:
        result = await git(
            await self.main(),
            "rev-parse",
            "--verify",
            "-q",
            f"refs/heads/{branch}^{{commit}}",
            ok=(0, 1),
        )
        if result.code != 0:
            raise GitError(f"the branch {branch} no longer exists in {self.repo}")
        return result.out.strip()

    async def identity(self) -> list[str]:
        """`-c` options naming tailagent as author and committer where the repository
        (or the person's git config) names nobody: a commit must never fail for that."""
        found = await git(
            await self.main(), "config", "--get-regexp", r"^user\.(name|email)$", ok=(0, 1)
        )
        named = {k: v for k, _, v in (line.partition(" ") for line in found.out.splitlines())}
        options: list[str] = []
        for key, fallback in (("user.name", FALLBACK_NAME), ("user.email", FALLBACK_EMAIL)):
            if not named.get(key, "").strip():
                options += ["-c", f"{key}={fallback}"]
        return options

    async def uncommitted(self, linked: Repository, refresh: bool = False) -> list[str]:
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
        return unique(status_paths(result.out))

    async def checkouts(self) -> list[Checkout]:
        result = await git(await self.main(), "worktree", "list", "--porcelain", "-z")
        checkouts: list[Checkout] = []
        path: Path | None = None
        branch: str | None = None
        for item in result.out.split("\0"):
            if item.startswith("worktree "):
                path, branch = Path(item.removeprefix("worktree ")), None
            elif item.startswith("branch "):
                branch = item.removeprefix("branch ")
            elif item == "" and path is not None:
                checkouts.append(Checkout(path, branch))
                path = None
        if path is not None:
            checkouts.append(Checkout(path, branch))
        return checkouts
