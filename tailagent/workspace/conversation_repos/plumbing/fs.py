"""The few file-system calls the async worktree code makes, as plain functions: a blocking
`Path` method called inside a coroutine is what the linter flags (ASYNC240), and these
are too quick to be worth a thread."""

from __future__ import annotations

import os
from pathlib import Path


def make_root(root: Path) -> None:
    """The worktrees' directory in the state dir, private to its owner."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)


def is_file(path: Path) -> bool:
    return path.is_file()


def is_dir(path: Path) -> bool:
    return path.is_dir()


def lexists(path: Path) -> bool:
    """Whether anything is at `path`, a symbolic link included (not followed)."""
    return os.path.lexists(path)


def is_real_dir(path: Path) -> bool:
    """A directory, not a symbolic link to one."""
    return path.is_dir() and not path.is_symlink()


def unlink(path: Path) -> None:
    path.unlink(missing_ok=True)


def text(path: Path) -> str:
    return path.read_text()


def resolved(path: Path) -> Path:
    return path.resolve()
