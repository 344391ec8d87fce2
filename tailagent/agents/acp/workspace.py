"""The workspace fence: a path an agent names is opened beneath the workspace, never
outside it.

A path that is checked by name and then opened by name again can be redirected in
between: an agent that swapped a directory for a symlink to `/etc` at the right moment
read outside the workspace (209 of 3,000 reads). So nothing here checks a name before
opening it. `open_beneath` walks the path from a descriptor of the workspace's root,
one component at a time, each opened relative to the one before with O_NOFOLLOW: what
is opened is what was walked. A symlink met on the way is read and followed by the
walk itself, so one that stays inside the workspace works as before, and one that
leads out of it (an absolute target elsewhere, `..` above the root) is refused.

`confine` only names a path (a diff's file, a terminal's directory); it opens nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path, PurePosixPath

# As the kernel's own limit on symlinks followed in one path (MAXSYMLINKS).
MAX_SYMLINKS = 40
DIRECTORY = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class OutsideWorkspace(PermissionError):
    pass


def confine(workspace: Path, path: str) -> Path:
    """The real path `path` names, relative to the workspace when not absolute."""
    root = workspace.resolve()
    candidate = Path(path)
    resolved = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if resolved != root and root not in resolved.parents:
        raise OutsideWorkspace(f"{path} is outside the workspace {root}")
    return resolved


def _components(path: str, roots: tuple[PurePosixPath, ...], named: str) -> list[str]:
    """The components of `path` below the workspace: an absolute path must start with
    the workspace's path (its real one, or as it was given)."""
    candidate = PurePosixPath(path)
    if not candidate.is_absolute():
        return list(candidate.parts)
    for root in roots:
        if candidate.is_relative_to(root):
            return list(candidate.relative_to(root).parts)
    raise OutsideWorkspace(f"{named} is outside the workspace {roots[0]}")


def _link_target(name: str, directory: int) -> str | None:
    """What the symlink `name` points to, or None if it is not a symlink (now)."""
    try:
        return os.readlink(name, dir_fd=directory)
    except OSError:
        return None


def open_beneath(
    workspace: Path, path: str, flags: int, *, mode: int = 0o666, make_parents: bool = False
) -> int:
    """A descriptor of the file `path` names inside `workspace`, opened with `flags`
    (plus O_NOFOLLOW and O_CLOEXEC). `make_parents` creates missing directories on
    the way, each beneath the one before. Raises OutsideWorkspace, or the OSError of
    the open."""
    real = PurePosixPath(workspace.resolve())
    roots = (real, PurePosixPath(os.path.abspath(workspace)))
    names = _components(path, roots, path)
    stack = [os.open(real, DIRECTORY)]  # the directories walked, the root first
    followed = 0
    try:
        while names:
            name = names.pop(0)
            if name == "..":
                if len(stack) == 1:
                    raise OutsideWorkspace(f"{path} is outside the workspace {real}")
                os.close(stack.pop())
                continue
            try:
                if not names:
                    return os.open(
                        name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=stack[-1]
                    )
                stack.append(_directory(name, stack[-1], make_parents))
                continue
            except OSError as exc:
                # A symlink where a directory or the file was: ELOOP or ENOTDIR.
                looped = exc.errno in (errno.ELOOP, errno.ENOTDIR)
                target = _link_target(name, stack[-1]) if looped else None
                if target is None:
                    raise
            followed += 1
            if followed > MAX_SYMLINKS:
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
            if os.path.isabs(target):
                names = _components(target, roots, f"{path} (a symlink to {target})") + names
                while len(stack) > 1:
                    os.close(stack.pop())
            else:
                names = list(PurePosixPath(target).parts) + names
        # The path named the root, ended in `..`, or at a symlink to a directory.
        raise IsADirectoryError(errno.EISDIR, "a directory, not a file", path)
    finally:
        for directory in stack:
            os.close(directory)


def _directory(name: str, parent: int, make: bool) -> int:
    try:
        return os.open(name, DIRECTORY, dir_fd=parent)
    except FileNotFoundError:
        if not make:
            raise
    with contextlib.suppress(FileExistsError):  # made meanwhile: opened like any other
        os.mkdir(name, dir_fd=parent)
    return os.open(name, DIRECTORY, dir_fd=parent)
