"""What git keeps in its git dirs, read from the files themselves: the object stores a
repository reads (its own and those its alternates name), what operation someone left
half-done, and, for the worktrees of an older tailagent (`git worktree add`, see
conversation_repos/legacy.py), which git dir git made for one and whether its `.git` still names it.

A linked worktree's git dir is found from git's own record in the repository
(`<common dir>/worktrees/<name>/gitdir` names the worktree), never from the worktree's
`.git`, which the agent may have written. Plain file reads, no git call.
"""

from __future__ import annotations

import ast
import os
import shutil
import stat
from pathlib import Path

# How deep git follows alternates of alternates (`MAX_ALTERNATES`... in its sources, 5).
ALTERNATES_DEPTH = 5

_IN_PROGRESS = (
    ("rebase-merge", "a rebase"),
    ("rebase-apply", "a rebase"),
    ("MERGE_HEAD", "a merge"),
    ("CHERRY_PICK_HEAD", "a cherry-pick"),
    ("REVERT_HEAD", "a revert"),
)


def in_progress(git_dir: Path) -> str | None:
    """The operation someone left half-done in this git dir ("a rebase", ...), if any."""
    for name, what in _IN_PROGRESS:
        if (git_dir / name).exists():
            return what
    return None


def rebasing(common: Path, ref: str) -> Path | None:
    """The git dir (the main one or a linked worktree's) where `ref` is being rebased:
    git detaches HEAD meanwhile, so `worktree list` does not show the branch there."""
    for gitdir in [common, *sorted((common / "worktrees").glob("*"))]:
        for name in ("rebase-merge", "rebase-apply"):
            head_name = gitdir / name / "head-name"
            if head_name.is_file() and head_name.read_text().strip() == ref:
                return gitdir
    return None


def git_dir_of(common: Path, path: Path) -> Path | None:
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


def links_to(path: Path, git_dir: Path) -> bool:
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


def forget(common: Path, path: Path) -> bool:
    """Removes git's record of the linked worktree at `path` from the repository whose
    common dir is `common` (what `git worktree prune` does for a worktree that is gone,
    for this one only); True when there was one."""
    entry = git_dir_of(common, path)
    if entry is None:
        return False
    shutil.rmtree(entry, ignore_errors=True)
    return True


def stale(common: Path, under: Path) -> list[Path]:
    """git's records of linked worktrees under `under` whose `.git` is gone (with their
    directory) or is a directory now (a repository of its own): theirs to forget. One
    whose `.git` file was rewritten is not: that worktree is left as it is."""
    found = []
    for entry in sorted((common / "worktrees").glob("*")):
        try:
            named = Path(os.path.normpath(entry / (entry / "gitdir").read_text().strip()))
        except OSError:
            continue
        if not named.parent.is_relative_to(under):
            continue
        if not os.path.lexists(named) or (named.is_dir() and not named.is_symlink()):
            found.append(entry)
    return found


def common_dir_of(top: Path) -> Path:
    """The common git dir of the checkout at `top`, as git finds it: `.git` itself, or
    the git dir a `.git` file names, and the `commondir` that one names (for a caller
    that cannot wait for git: WorkspaceRepo asks git itself when it can)."""
    git_dir = top / ".git"
    if git_dir.is_file():
        git_dir = top / git_dir.read_text().removeprefix("gitdir: ").strip()
    common = git_dir / "commondir"
    if common.is_file():
        git_dir = git_dir / common.read_text().strip()
    return Path(os.path.normpath(git_dir.resolve()))


def borrowed_objects(common: Path) -> tuple[Path, ...]:
    """The object stores a repository whose common dir is `common` reads: its own, then
    those its `objects/info/alternates` names, and theirs in turn (as deep as git goes),
    each once, as absolute paths."""
    found: list[Path] = []
    waiting = [((common / "objects").resolve(), 0)]
    while waiting:
        objects, depth = waiting.pop(0)
        if objects in found:
            continue
        found.append(objects)
        if depth >= ALTERNATES_DEPTH:
            continue
        try:
            lines = (objects / "info" / "alternates").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            if not line.strip() or line.startswith("#"):
                continue
            if line.startswith('"'):  # C-quoted, as git writes a path with odd characters
                try:
                    line = ast.literal_eval("b" + line).decode(errors="surrogateescape")
                except (ValueError, SyntaxError, AttributeError):
                    continue
            waiting.append(((objects / line).resolve(), depth + 1))
    return tuple(found)
