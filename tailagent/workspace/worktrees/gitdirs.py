"""What git keeps in its git dirs, read from the files themselves: which git dir git made
for a worktree, whether the worktree's `.git` still names it, and what operation someone
left half-done.

The agent may write any file of its worktree, `.git` included, so a worktree's git dir is
found from git's own record in the repository (`<common dir>/worktrees/<name>/gitdir`
names the worktree), never from the worktree's `.git`. Plain file reads, no git call:
they are what decides whether git may be run there at all.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

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


def relink(path: Path, git_dir: Path) -> None:
    """Writes the worktree's `.git` as git wrote it, so git will move and remove the
    worktree (it refuses one whose `.git` names another git dir): only on its way out."""
    dot_git = path / ".git"
    if dot_git.is_dir() and not dot_git.is_symlink():
        shutil.rmtree(dot_git)
    else:
        dot_git.unlink(missing_ok=True)
    dot_git.write_text(f"gitdir: {git_dir}\n")
