"""One running server per state dir.

Two servers on one state dir would each take the other's unfinished tasks for
leftovers of a crash and close them, share one server id, one signing key and one
local token. The first server holds an exclusive lock on `server.lock` for as long
as it runs (the kernel drops it when the process dies, however it dies), and
writes its PID and listener there, so a second one can say whom it ran into.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

LOCK_NAME = "server.lock"


class StateDirBusy(Exception):
    """Another server runs on this state dir; str() names it and what to do."""


class StateLock:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StateDirBusy(self._busy_message()) from None
        self._fd = fd
        self.describe("starting", "")

    def describe(self, listener: str, agent: str, tsnet: bool = False) -> None:
        """Says, in the lock file, which process holds it, where it listens, which agent
        it runs and whether it is a tailnet node of its own (what `doctor` and `call`
        want to know of the running server)."""
        assert self._fd is not None
        record = json.dumps(
            {"pid": os.getpid(), "listener": listener, "agent": agent, "tsnet": tsnet}
        ).encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, record + b"\n", 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the lock
            self._fd = None

    def _busy_message(self) -> str:
        holder = _holder(self.path)
        who = "its PID unknown"
        if "pid" in holder:
            who = f"PID {holder['pid']}, listening on {holder.get('listener', '?')}"
        return (
            f"another tailagent server ({who}) runs on the state dir {self.path.parent}: "
            "stop it first, or give this one its own --state-dir"
        )


def running_server(state_dir: Path) -> dict[str, str] | None:
    """The PID, listener and agent of the server running on `state_dir`, if one is."""
    path = state_dir / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _holder(path)
    finally:
        os.close(fd)
    return None


def _holder(path: Path) -> dict[str, str]:
    """What the lock's holder wrote of itself ({} when it cannot be read)."""
    try:
        record = json.loads(path.read_text())
        return {key: str(value) for key, value in record.items()}
    except (OSError, ValueError, AttributeError):
        return {}
