"""git for the workspace and its conversations' repositories, each named outright.

Every concern runs git through this one object, so how a repository is named (the person's
checkout found once from its directory, a conversation's repository as `<its dir>/.git`
after guard.py has looked at it), which programs git may start (`git_programs`), what a
conversation's repository borrows and who commits are decided in one place.

A conversation's repository is the agent's: it may write its config, and every setting
there that would make tailagent's git run a program or read a file outside the repository
is overridden on each call (`_IN_CONVERSATIONS`, on top of git.py's): signing (it runs
`gpg.program`), the mailmap, diff order and include files, gc started behind a commit, and
the excludes and attributes files: tailagent's own are named instead, copies of the
person's made at the first look (`own_files`), so that no file in the person's home or
the agent's (a FIFO, `/dev/zero`) can steer or hang tailagent's git. Replace refs and
grafts are off, so what tailagent shows of a conversation is what its commits hold. The
person's hooks and filter and merge drivers (`git_programs`) are carried from the base's
config; the conversation's own never run.

Each call has git.py's deadline, or the one the base's own config names
(`git config tailagent.gitDeadline 300` for a repository whose git is slow for good
reasons): a setting of the person's, read from the base, never from a conversation's
repository, whose config is the agent's.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from tailagent.statedir.files import write_private
from tailagent.workspace.conversation_repos.plumbing import guard
from tailagent.workspace.conversation_repos.plumbing.errors import WorktreeTampered
from tailagent.workspace.conversation_repos.plumbing.fs import resolved
from tailagent.workspace.conversation_repos.plumbing.gitdirs import borrowed_objects, common_dir_of
from tailagent.workspace.conversation_repos.plumbing.porcelain import status_paths, unique
from tailagent.workspace.conversation_repos.plumbing.specials import refuse_specials
from tailagent.workspace.git import (
    DEADLINE,
    NO_HOOKS,
    NO_PROGRAMS,
    GitError,
    Repository,
    Setting,
    drivers,
    git,
    without_drivers,
)

FALLBACK_NAME = "tailagent"
FALLBACK_EMAIL = "tailagent@localhost"
# The most of the person's excludes or attributes file that is copied (they are lists of
# patterns: a few kilobytes).
_COPIED = 1 << 20

_IN_CONVERSATIONS: tuple[Setting, ...] = (
    ("commit.gpgSign", "false"),  # signing runs gpg.program or gpg.ssh.program
    ("log.showSignature", "false"),  # and so does checking a signature
    ("gc.auto", "0"),  # no gc or maintenance started behind a commit
    ("maintenance.auto", "false"),
    ("log.mailmap", "false"),  # `mailmap.file` could name a FIFO or /dev/zero
    ("diff.orderFile", os.devnull),  # as could the diff's order file
    # The repository is its agent's uid's when the server is root (sandbox/users.py):
    # git's ownership check guards a repository found by discovery, and tailagent names
    # this one outright, with every setting that runs a program off.
    ("safe.directory", "*"),
)
# Of git's own variables: no replace refs or grafts (the agent's `refs/replace` could show
# a person other contents than a merge takes), and no fetch for a missing object.
_CONVERSATION_ENV: tuple[Setting, ...] = (
    ("GIT_NO_REPLACE_OBJECTS", "1"),
    ("GIT_GRAFT_FILE", os.devnull),
    ("GIT_NO_LAZY_FETCH", "1"),
)


@dataclass(frozen=True)
class Checkout:
    """A checkout git lists for the repository (`git worktree list`)."""

    path: Path
    branch: str | None  # full ref name, None when detached (or bare)


@dataclass(frozen=True)
class _Base:
    """What the first look at the workspace found out once."""

    repository: Repository
    common: Path
    object_format: str
    # The person's own settings a conversation's repository is run under.
    persons: tuple[Setting, ...]


class WorkspaceRepo:
    """The workspace repository at `repo`; `git_programs` lets its git run the hooks and
    filter and merge drivers the repository's config names (see git.py). `own_files` is
    where tailagent keeps its copies of the person's excludes and attributes files (a
    directory of the state dir, where no agent writes)."""

    def __init__(self, repo: Path, own_files: Path, git_programs: bool = False) -> None:
        self.repo = repo
        self.own_files = own_files
        self.git_programs = git_programs
        self._base: _Base | None = None

    async def _found(self) -> _Base:
        if self._base is None:
            found = await git(
                self.repo,
                "rev-parse",
                "--path-format=absolute",
                "--absolute-git-dir",
                "--git-common-dir",
                "--show-toplevel",
                "--show-object-format",
            )
            git_dir, common, top, object_format = found.out.splitlines()
            settings = NO_PROGRAMS + (() if self.git_programs else NO_HOOKS)
            main = Repository(Path(git_dir), Path(top), settings)
            main = replace(main, deadline=await _deadline(main))
            persons = await self._persons(main)
            self._base = _Base(main, resolved(Path(common)), object_format, persons)
        return self._base

    async def _persons(self, main: Repository) -> tuple[Setting, ...]:
        """tailagent's copies of the person's excludes and attributes files, and with
        `git_programs` their hooks and drivers, as settings for a conversation's
        repository."""
        home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "git"
        settings: list[Setting] = []
        files = (("core.excludesFile", "ignore"), ("core.attributesFile", "attributes"))
        for key, default in files:
            named = await git(main, "config", "--path", "--get", key, ok=(0, 1))
            copy = self.own_files / f".git-{default}"
            write_private(copy, _plain_text(Path(named.out.strip() or home / default)))
            settings.append((key, str(copy)))
        if self.git_programs:  # the hooks directory git would run the person's from
            hooks = await git(main, "rev-parse", "--path-format=absolute", "--git-path", "hooks")
            settings.append(("core.hooksPath", hooks.out.strip()))
            settings += await drivers(main)
        return tuple(settings)

    async def main(self) -> Repository:
        """The workspace's own checkout, by the git dir and top level git found for it at
        the first look (the person's checkout: no agent writes there)."""
        return (await self._found()).repository

    async def common_dir(self) -> str:
        """The repository's shared git dir: what a record says it belongs to."""
        return str((await self._found()).common)

    async def object_format(self) -> str:
        """The base's object format (`sha1`, `sha256`): a repository borrowing its objects
        is made with the same."""
        return (await self._found()).object_format

    def shared_objects(self) -> tuple[Path, ...]:
        """The object stores a conversation's repository borrows, read-only: the base's
        own and those its alternates name (see gitdirs.borrowed_objects). Asked by the
        sandbox, which cannot wait: before the first look, the files say where they are."""
        common = self._base.common if self._base else common_dir_of(self.repo.resolve())
        return borrowed_objects(common)

    def alternates(self) -> str:
        """The text tailagent writes to a conversation's `objects/info/alternates`."""
        return "".join(f"{objects}\n" for objects in self.shared_objects())

    async def content(self, repository: Repository) -> Repository:
        """`repository` for commands that read or write files (a checkout, `add`, a
        merge): with its filter and merge drivers off, unless the person lets them run."""
        return repository if self.git_programs else await without_drivers(repository)

    async def init_conversation(self, path: Path, branch: str) -> None:
        """Makes `path` a repository of its own (`path/.git`, HEAD on the unborn `branch`)
        that borrows the base's objects: nothing of the base is copied but the person's
        own ignore list (`info/exclude`) and, for a shallow base, where its history ends."""
        base = await self._found()
        for objects in self.shared_objects():
            if "\n" in str(objects) or str(objects).startswith(("#", '"')):
                raise GitError(f"the objects directory {objects} cannot be named in alternates")
        await git(path.parent, "init", "-q", "--template=", f"--object-format={base.object_format}",
                  f"--initial-branch={branch}", str(path))  # fmt: skip
        git_dir = path / ".git"
        (git_dir / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (git_dir / "objects" / "info" / "alternates").write_text(self.alternates())
        for name in ("info/exclude", "shallow"):
            if (base.common / name).is_file():
                (git_dir / name).parent.mkdir(exist_ok=True)
                (git_dir / name).write_bytes((base.common / name).read_bytes())

    async def conversation(self, path: Path) -> Repository:
        """git for the conversation's repository at `path`: its `.git` looked at first
        (guard.py: WorktreeTampered if it could steer git elsewhere), then every setting
        of its config that could run a program overridden (see the module's docstring)."""
        base = await self._found()
        guard.check(path, self.shared_objects())
        hooks = () if self.git_programs else NO_HOOKS
        own = Repository(path / ".git", path, NO_PROGRAMS + hooks + _IN_CONVERSATIONS,
                         _CONVERSATION_ENV, base.repository.deadline)  # fmt: skip
        return (await without_drivers(own)).with_settings(*base.persons)

    async def trusted(self, path: Path) -> Repository | None:
        """git for the conversation's repository at `path`, or None if guard.py refuses it."""
        try:
            return await self.conversation(path)
        except WorktreeTampered:
            return None

    async def show_base(
        self, own: Repository, base_branch: str, commit: str, fresh: bool = False
    ) -> None:
        """Sets the base branch, under its own name (`main`), in the conversation's
        repository `own` to `commit`: what the agent reads the base's work by, and what
        it rebases onto when a merge conflicts ("rebase your branch onto main"). Moved on
        only where that loses nothing the agent committed there itself; a `fresh`
        repository has none yet."""
        ref = f"refs/heads/{base_branch}"
        if not fresh:
            found = await git(own, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}", ok=(0, 1))
            old = found.out.strip() if found.code == 0 else None
            if old == commit:
                return
            if old is not None:
                behind = await git(own, "merge-base", "--is-ancestor", old, commit, ok=(0, 1))
                if behind.code != 0:
                    return
                await git(own, "update-ref", ref, commit, old)
                return
        await git(own, "update-ref", ref, commit, "")

    async def ref_exists(self, ref: str) -> bool:
        result = await git(
            await self.main(), "rev-parse", "--verify", "-q", f"{ref}^{{commit}}", ok=(0, 1)
        )
        return result.code == 0

    async def tip(self, branch: str, where: Repository | None = None) -> str:
        """The commit `branch` is at in the base (or in the repository `where`)."""
        result = await git(
            where or await self.main(),
            "rev-parse",
            "--verify",
            "-q",
            f"refs/heads/{branch}^{{commit}}",
            ok=(0, 1),
        )
        if result.code != 0:
            place = where.work_tree if where else self.repo
            raise GitError(f"the branch {branch} no longer exists in {place}")
        return result.out.strip()

    async def base_commits(self) -> list[str]:
        """The commits the base's branches, tags and remote-tracking branches are at."""
        listed = await git(
            await self.main(),
            "for-each-ref",
            "--format=%(objecttype) %(objectname) %(*objecttype) %(*objectname)",
            "refs/heads",
            "refs/tags",
            "refs/remotes",
        )
        commits = []
        for line in listed.out.splitlines():
            kind, sha, peeled_kind, peeled = [*line.split(), "", ""][:4]
            if kind == "commit" or peeled_kind == "commit":
                commits.append(sha if kind == "commit" else peeled)
        return commits

    async def identity(self) -> list[str]:
        """`-c` options naming who commits: as the base's config (or the person's) says,
        else tailagent. Always given, as `author.*` and `committer.*` too: a conversation's
        repository has the agent's config, not the person's."""
        found = await git(
            await self.main(),
            "config",
            "--get-regexp",
            r"^(user|author|committer)\.(name|email)$",
            ok=(0, 1),
        )
        named = {k: v for k, _, v in (line.partition(" ") for line in found.out.splitlines())}
        options: list[str] = []
        for part, fallback in (("name", FALLBACK_NAME), ("email", FALLBACK_EMAIL)):
            user = named.get(f"user.{part}", "").strip() or fallback
            options += ["-c", f"user.{part}={user}"]
            for role in ("author", "committer"):
                value = named.get(f"{role}.{part}", "").strip() or user
                options += ["-c", f"{role}.{part}={value}"]
        return options

    async def uncommitted(self, conversation: Repository, refresh: bool = False) -> list[str]:
        """The files changed and not committed in a conversation's repository. `refresh`
        lets git write the index's refreshed file times back (a status after a checkout is
        ~6x slower until then): only between turns, when the agent cannot be holding the
        index's lock. A submodule counts by the commit it is on: git is not run inside it
        (it would find its repository from a `.git` there, which the agent may have
        written). A special file anywhere in its work tree is refused first (SpecialFile:
        see specials.py), as every look at the tree (a status, an add, a diff) starts here."""
        await refuse_specials(conversation.work_tree)
        env = {"GIT_OPTIONAL_LOCKS": "1"} if refresh else None
        result = await git(
            conversation,
            "status",
            "--porcelain",
            "-z",
            "--untracked-files=all",
            "--ignore-submodules=dirty",
            env=env,
        )
        return unique(status_paths(result.out))

    async def checkouts(self) -> list[Checkout]:
        """The base repository's own checkouts (the person's linked worktrees included)."""
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


async def _deadline(main: Repository) -> float:
    """The seconds each git call may take: `tailagent.gitDeadline` of the base's config,
    else git.py's `DEADLINE`."""
    named = await git(main, "config", "--get", "tailagent.gitDeadline", ok=(0, 1))
    if not named.out.strip():
        return DEADLINE
    try:
        seconds = float(named.out)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds < 86400:
        raise GitError(
            f"tailagent.gitDeadline in {main.work_tree}'s config is {named.out.strip()!r}: "
            "name the seconds each git call may take (say 60)"
        )
    return seconds


def _plain_text(path: Path) -> str:
    """The text of the person's file at `path` when it is a plain file (a link to one
    included), at most `_COPIED` bytes of it; else "". Opened without waiting, so a FIFO
    put there after the look cannot keep it."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return ""
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as file:
        return file.read(_COPIED).decode("utf-8", errors="replace")
