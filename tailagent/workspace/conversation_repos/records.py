"""What is tailagent's: the records in the state dir of the conversations' directories
(each a repository of its own, on its branch) it made, and of the merges it did.

A directory or branch without a record is never touched, whatever its name: the record,
`<root>/<context>.json`, is written before the directory exists and removed after it is
gone. Records live in the state dir, where no agent writes, so they are what every other
concern trusts; how they are named, read and checked changes here only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from tailagent.statedir.files import write_private
from tailagent.workspace.conversation_repos.plumbing.errors import (
    NoWorktree,
    OtherRepository,
    WorktreeDeleted,
)
from tailagent.workspace.conversation_repos.plumbing.fs import make_root, text
from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo
from tailagent.workspace.git import GitError

BRANCH_PREFIX = "tailagent/"
# A worktree made ahead of the conversation that will take it is named `+ready-<hex>`:
# `+` is never in a context id used as a file name (see _SAFE_ID), so no caller's
# conversation can be mistaken for one.
READY_PREFIX = "+ready-"
# What was merged, by conversation (`.merged/<name>.json`): a second merge can say where
# the first went. `.` starts no context id used as a file name either.
MERGED = ".merged"
# The repositories whose first start here was told what worktree mode does there.
EXPLAINED = ".explained"

# Context ids come from callers: only ids that are plainly safe as a file name are used
# as one; any other id gets a name derived from its hash (the record keeps the real id).
_SAFE_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")


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
    # False for a record of an older tailagent, whose worktree was a `git worktree` of the
    # base and its branch a branch there (legacy.py converts them).
    own_repository: bool = True
    # The name a person finds it by in the root, its short id (Maker.free_name): its
    # directory's own, or a link's to a directory made ahead, which keeps the name it was
    # made with (an agent may have started in it); "" for a record of an older tailagent.
    name: str = ""

    @property
    def shown(self) -> Path:
        """Where a person finds it: `<root>/<short id>` (a link, for one made ahead)."""
        return self.path.parent / self.name if self.name else self.path


def _plain_name(name: object) -> str:
    """A record's `name`, if it is one a directory of the root may have, else ""."""
    plain = isinstance(name, str) and _SAFE_ID.fullmatch(name) and name[0] not in ".-"
    return str(name) if plain else ""


@dataclass(frozen=True)
class Merged:
    """Where a conversation's branch went when it was merged."""

    context_id: str
    branch: str
    base_branch: str
    commit: str
    strategy: str
    at: str


def fresh(context_id: str, path: Path, branch: str, base_branch: str, base_commit: str) -> Worktree:
    """A worktree's record as of now."""
    created = datetime.now(UTC).isoformat(timespec="seconds")
    return Worktree(context_id, path, branch, base_branch, base_commit, created)


class Records:
    """The records under `root` (`<state dir>/worktrees`) of the repository `repo`."""

    def __init__(self, root: Path, repo: WorkspaceRepo) -> None:
        self.root = root
        self.repo = repo
        # What is done before a record is opened (`read`), the first time in a process:
        # the records of an older tailagent made the current kind (legacy.py hands its
        # conversion here), so no concern reads a record of the older kind by surprise.
        self.opening: Callable[[], Awaitable[None]] | None = None

    def slug(self, context_id: str) -> str:
        if _SAFE_ID.fullmatch(context_id):
            return context_id
        return "x-" + hashlib.sha256(context_id.encode()).hexdigest()[:32]

    def record_path(self, context_id: str) -> Path:
        return self.root / f"{self.slug(context_id)}.json"

    def ready_record(self, path: Path) -> Path:
        """The record of the worktree made ahead at `path`."""
        return self.root / f"{path.name}.json"

    def merged_path(self, context_id: str) -> Path:
        return self.root / MERGED / f"{self.slug(context_id)}.json"

    async def load(self, context_id: str) -> Worktree | None:
        return await self.read(self.record_path(context_id), context_id)

    async def read(self, path: Path, context_id: str) -> Worktree | None:
        """The record at `path`, checked to be tailagent's for `context_id` ("" for a
        worktree made ahead) in this repository; None when there is none. The records
        are opened first (`opening`), whoever reads one."""
        if self.opening is not None:
            await self.opening()
        return await self._read(path, context_id)

    async def _read(self, path: Path, context_id: str) -> Worktree | None:
        try:
            data = json.loads(text(path))
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
                own_repository=data.get("own_repository") is True,
                name=_plain_name(data.get("name")),
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
        if repository != await self.repo.common_dir():
            raise OtherRepository(
                f"conversation {context_id}'s worktree belongs to the repository at "
                f"{repository}, not {self.repo.repo}: serve that workspace to use it",
                str(repository),
                worktree.idle,
            )
        return worktree

    async def save(self, worktree: Worktree, record_path: Path | None = None) -> None:
        """Writes the worktree's record (at `record_path`, or the conversation's own),
        naming this repository as the one it belongs to."""
        repository = await self.repo.common_dir()
        record = asdict(worktree) | {"path": str(worktree.path), "repository": repository}
        path = record_path or self.record_path(worktree.context_id)
        write_private(path, json.dumps(record, indent=2) + "\n")

    async def claim(self, worktree: Worktree, ready_record: Path) -> None:
        """Makes the record of a worktree made ahead the conversation's without a moment
        when two records name its directory (`clean` would take one named by the made-ahead
        record alone): it is rewritten where it is, the conversation's id in it, then
        renamed to the conversation's name. A stop between leaves the one record, the
        conversation's, under the made-ahead name; `settle` finishes it at the next start."""
        await self.save(worktree, ready_record)
        os.rename(ready_record, self.record_path(worktree.context_id))

    def settle(self, record: Path) -> bool:
        """Finishes a claim a stop cut short (see `claim`): a record under a made-ahead
        name that names a conversation goes to that conversation's name. True when it was
        one; a GitError when the conversation has a record already (both are left)."""
        try:
            data = json.loads(text(record))
            context_id, path = data["context_id"], Path(data["path"])
        except (OSError, ValueError, KeyError, TypeError):
            return False
        if not isinstance(context_id, str) or not context_id:
            return False
        if path != self.root.resolve() / record.stem:
            return False  # not the record of this directory: `read` says why
        target = self.record_path(context_id)
        if target.exists():
            raise GitError(
                f"the record {record} gives {path} to conversation {context_id}, which has "
                f"the record {target} already: both are left alone"
            )
        os.rename(record, target)
        return True

    def names_taken(self) -> set[str]:
        """The names in the root no new conversation may have: every entry there, and
        every directory or name a record gives (a directory not made yet included)."""
        taken = {entry.name for entry in self.root.iterdir()} if self.root.is_dir() else set()
        for record in self.root.glob("*.json") if self.root.is_dir() else ():
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
                data = json.loads(record.read_text())
                taken |= {Path(data["path"]).name, str(data.get("name") or "")}
        return taken

    def link(self, worktree: Worktree) -> None:
        """The link `<root>/<name>` to a directory made ahead that a conversation took,
        made if it is missing (a stop between the claim and the link); never over
        anything else that is there."""
        if not worktree.name or worktree.name == worktree.path.name:
            return
        with contextlib.suppress(FileExistsError):
            (self.root / worktree.name).symlink_to(worktree.path.name, target_is_directory=True)

    def unlink(self, worktree: Worktree) -> None:
        """The link to the conversation's directory, if it is one and points there."""
        link = self.root / worktree.name
        if worktree.name and worktree.name != worktree.path.name and link.is_symlink():
            with contextlib.suppress(OSError):
                if os.readlink(link) == worktree.path.name:
                    link.unlink()

    async def require(self, context_id: str, present: bool = True) -> Worktree:
        worktree = await self.load(context_id)
        if worktree is None:
            raise NoWorktree(f"no worktree for conversation {context_id}")
        if present and not worktree.idle and not worktree.path.is_dir():
            went = (
                f"and its repository with it (its branch {worktree.branch} and commits)"
                if worktree.own_repository
                else f"its branch {worktree.branch} is still there"
            )
            raise WorktreeDeleted(
                f"the worktree of conversation {context_id} ({worktree.path}) was deleted by "
                f"hand, {went}: run `tailagent discard {context_id}` to drop what is left"
            )
        return worktree

    def branches(self, but: str) -> dict[str, str]:
        """The conversations other than `but`, idle or not -> the branch its record gives
        it (several may have one name: each owner's are unique, see Maker.free_branch)."""
        taken = {}
        for context_id in self.conversations(idle=True):
            if context_id != but:
                with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                    branch = json.loads(self.record_path(context_id).read_text())["branch"]
                    taken[context_id] = str(branch)
        return taken

    async def every(self) -> list[tuple[Path, Worktree]]:
        """Every record of this repository (made ahead ones too) and its path, as they are
        (not opened: what the opening itself reads); one that cannot be read, or is
        another repository's, is left out."""
        found = []
        for record in sorted(self.root.glob("*.json")) if self.root.is_dir() else ():
            try:
                context_id = json.loads(text(record))["context_id"]
                worktree = await self._read(record, context_id)
            except (GitError, OSError, ValueError, KeyError, TypeError):
                continue
            if worktree is not None and record in (
                self.record_path(context_id),
                self.ready_record(worktree.path),
            ):
                found.append((record, worktree))
        return found

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
            if isinstance(context_id, str) and self.record_path(context_id) == record:
                found.append(context_id)
        return found

    def known(self) -> dict[str, str]:
        """Every conversation tailagent keeps something of here (a worktree, idle or not,
        or the record of its merge) -> the short name its branch has or had."""
        named = {context_id: "" for context_id in self.conversations(idle=True)}
        for context_id in named:
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                named[context_id] = json.loads(self.record_path(context_id).read_text())["branch"]
        merged = self.root / MERGED
        for record in merged.glob("*.json") if merged.is_dir() else ():
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                data = json.loads(record.read_text())
                if self.merged_path(data["context_id"]) == record:
                    named.setdefault(data["context_id"], data["branch"])
        return {c: str(b).removeprefix(BRANCH_PREFIX) for c, b in named.items()}

    def merged(self, context_id: str) -> Merged | None:
        """Where the conversation's last merge went, if it was merged here."""
        try:
            data = json.loads(self.merged_path(context_id).read_text())
            found = Merged(**{key: str(data[key]) for key in Merged.__dataclass_fields__})
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return found if found.context_id == context_id else None

    def remember_merge(
        self, worktree: Worktree, base_branch: str, commit: str, strategy: str
    ) -> None:
        at = datetime.now(UTC).isoformat(timespec="seconds")
        merged = Merged(worktree.context_id, worktree.branch, base_branch, commit, strategy, at)
        (self.root / MERGED).mkdir(exist_ok=True, mode=0o700)
        write_private(self.merged_path(worktree.context_id), json.dumps(asdict(merged)) + "\n")

    def forget_merges(self, live: set[str]) -> None:
        """The records of merges of conversations that no longer exist."""
        merged = self.root / MERGED
        for record in merged.glob("*.json") if merged.is_dir() else ():
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                if json.loads(record.read_text())["context_id"] not in live:
                    record.unlink()

    def explained(self) -> bool:
        """Whether a start in this repository already said what worktree mode does here;
        marks it said (the state dir remembers it, so it is said once)."""
        mark = self.root / EXPLAINED
        repository = str(self.repo.repo.resolve())
        try:
            said = mark.read_text().splitlines()
        except OSError:
            said = []
        if repository in said:
            return True
        make_root(self.root)
        write_private(mark, "".join(f"{line}\n" for line in [*said, repository]))
        return False
