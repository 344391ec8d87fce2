"""Looking at processes from the tests: is one alive, which are a server's children."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def alive(pid: int) -> bool:
    """Running, and not merely a zombie waiting to be reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def process_token(pid: int) -> str:
    """A process's name that holds inside a sandbox's pid namespace and outside it: its
    pid there (every fenced agent is pid 2 in its own namespace) and its start time in
    clock ticks since boot, which no namespace changes."""
    start = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19]
    return f"{pid}.{start}"


def token_pid(token: str) -> int | None:
    """The pid, seen from here, of the live process a `process_token` names: the same
    start time, and that pid innermost in its namespaces."""
    inner, _, start = token.partition(".")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, StopIteration):
            if (entry / "stat").read_text().rpartition(")")[2].split()[19] != start:
                continue
            status = (entry / "status").read_text()
            nspids = next(line for line in status.splitlines() if line.startswith("NSpid:"))
            if nspids.split()[-1] == inner and alive(int(entry.name)):
                return int(entry.name)
    return None


def token_alive(token: str) -> bool:
    """Whether the process a `process_token` names still runs."""
    return token_pid(token) is not None


def ancestors(pid: int) -> list[int]:
    """`pid`'s parent, its parent's parent, … up to init (a fenced agent's starts with
    the sandbox's own processes, then the server's child)."""
    found = []
    with contextlib.suppress(OSError):
        while pid > 1:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
            found.append(pid)
    return found


def children(pid: int) -> list[int]:
    """The live child processes of `pid` (say, a server's agent processes)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split() if alive(int(p))]


def status_kib(pid: int, field: str = "VmRSS") -> int | None:
    """A memory figure of /proc/PID/status (VmRSS, VmHWM) in KiB; None once it is gone."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return None


def tree_rss_kib(pid: int) -> int:
    """VmRSS of a process and all its descendants (a one-file binary's bootloader runs
    Python as its child)."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        total += status_kib(current) or 0
        try:
            pending += children(current)
        except OSError:
            continue
    return total


def open_sockets(pid: int) -> int:
    """How many sockets the process holds open (listeners and connections)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):  # closed while we looked
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    return count
