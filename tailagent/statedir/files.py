"""Files only their owner may read: written whole (keys, tokens, pins, records), made
before a library makes them with its own mode (the SQLite store), and the state dir
that holds them closed to its user at start.

At the bottom of the house: the access layer, the cards, the store, the worktrees and
the embedded node all keep secrets or state this way.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


def write_private(path: Path, text: str) -> None:
    """Writes a file readable only by its owner, atomically (a reader sees old or new)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp, 0o600)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


class NotPrivate(Exception):
    """A directory (or a file in it) tailagent cannot close to its user; str() names it
    and says what to do."""


def close_dir(directory: Path) -> list[str]:
    """Makes `directory` (0700), or closes one that exists: itself to 0700, each file in it
    to 0600, each directory in it to 0700. Returns what it had to close ("itself (0755)",
    "NAME (0644)"), for a warning; NotPrivate when something is not this user's to close.

    A state dir made by hand under umask 022, or files an older tailagent wrote (its task
    database and WAL files were 0644), let every user of the box read each prompt,
    answer and token hash. What is inside a directory in it (a worktree's checkout, the
    embedded node's files) keeps its own modes: once its directory is closed, nobody
    else reaches it, and a checkout's executable bits are git's business.
    """
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    closed = _close(directory, 0o700, directory)
    for entry in sorted(directory.iterdir()):
        if entry.is_symlink():
            continue  # what it points at is not the state dir's
        wanted = 0o700 if entry.is_dir() else 0o600
        closed += _close(entry, wanted, directory)
    return closed


def _close(path: Path, wanted: int, directory: Path) -> list[str]:
    info = path.stat()
    mode = stat.S_IMODE(info.st_mode)
    if not mode & 0o077:
        return []
    try:
        os.chmod(path, wanted)
    except OSError as exc:
        owner = "" if info.st_uid == os.getuid() else f", owned by uid {info.st_uid}"
        raise NotPrivate(
            f"{path} is open to other users ({mode:04o}{owner}) and cannot be closed: "
            f"{exc.strerror}; have its owner run `chmod -R go= {directory}`, or give "
            "tailagent a state dir of its own (--state-dir)"
        ) from None
    return [f"{'itself' if path == directory else path.name} ({mode:04o})"]


def create_private(path: Path) -> None:
    """Makes `path` an empty file only its owner may read, unless it exists. For a file a
    library creates with a mode of its own: SQLite makes a database 0644, then its
    -wal and -shm files with the database's mode, so one made here first keeps all
    three closed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    os.close(fd)
