"""Each fenced agent in a cgroup of its own, where the server has a cgroup v2 tree to
give: frozen and thawed by the kernel at once, and ended as one.

freezer.py stops a fence's processes between turns with SIGSTOP, in passes over /proc
until none is left running. The cgroup v2 freezer (`cgroup.freeze`, Linux 5.2) stops a
whole cgroup in one write, what forks meanwhile included, and no process leaves a
cgroup it cannot write. It needs a cgroup the server may make children in:

- under systemd, one delegated to it (`Delegate=yes`, which the shipped units and
  `service install` set). systemd marks such a cgroup with a `user.delegate` (or
  `trusted.delegate`) attribute and leaves what is under it alone; one it did not
  delegate stays systemd's, even to root, which may move or remove what it did not make;
- with no systemd (a container, a CI box), the server's own cgroup, if it can write it.

Elsewhere (cgroup v1 only, a kernel without `cgroup.freeze`, a cgroup that is systemd's,
a user who cannot write there) freezer.py's signals do it, and `find` says why.

A fenced process enters its cgroup itself: the fence's command line begins with a shell
that writes its own pid ("0") into `cgroup.procs` and then execs bwrap, so everything
bwrap starts is born inside (moving bwrap after its start would miss what it forked
first). The cgroups are named `tailagent-<server pid>-<n>`: where there is no systemd,
servers may share a parent, and a server's start removes only the empty ones of
servers gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "tailagent-"
OURS = re.compile(rf"{PREFIX}(\d+)-\d+")
DELEGATED = ("user.delegate", "trusted.delegate")  # systemd's marks, either one
# The shell that moves itself into the cgroup named by its $0 and becomes the fence.
ENTER = 'echo 0 > "$0/cgroup.procs" && exec "$@"'


@dataclass(frozen=True)
class Group:
    """One fenced process's cgroup: it and all it starts."""

    path: Path

    def entering(self) -> list[str]:
        """The command-line prefix that runs what follows inside this cgroup."""
        return ["/bin/sh", "-c", ENTER, str(self.path)]

    def freeze(self, frozen: bool) -> None:
        """Asks the kernel to freeze (or thaw) every process in it; OSError once gone."""
        (self.path / "cgroup.freeze").write_text("1" if frozen else "0")

    def frozen(self) -> bool:
        """Whether every process in it is frozen now (or it is gone)."""
        try:
            events = (self.path / "cgroup.events").read_text().split("\n")
        except OSError:
            return True
        return "frozen 1" in events

    def pids(self) -> list[int]:
        try:
            return [int(line) for line in (self.path / "cgroup.procs").read_text().split()]
        except OSError:
            return []

    def kill(self) -> None:
        """SIGKILL to all in it at once (`cgroup.kill`, Linux 5.14), else to each; a frozen
        process dies of it too."""
        try:
            (self.path / "cgroup.kill").write_text("1")
            return
        except FileNotFoundError:
            pass
        except OSError:
            return  # gone
        for pid in self.pids():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def remove(self) -> bool:
        """Removes it once empty; False while a process is still in it."""
        try:
            self.path.rmdir()
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return True


class Cgroups:
    """The server's cgroup, under which each fenced process gets one of its own."""

    def __init__(self, parent: Path) -> None:
        self.parent = parent
        self._numbers = itertools.count(1)
        self._made: set[Group] = set()  # not removed yet
        self._retired: set[Group] = set()  # their process ended; removed once empty

    @classmethod
    def find(cls) -> tuple[Cgroups | None, str]:
        """The server's own cgroup if it may make children there, and in words what
        freezes an agent between turns (and why not the cgroup freezer)."""
        own = own_cgroup()
        if own is None:
            return None, "signals (no cgroup v2 here)"
        if not os.access(own, os.W_OK):
            return None, f"signals ({own} is not this user's to write)"
        if Path("/run/systemd/system").is_dir() and not delegated(own):
            return None, f"signals ({own} is systemd's: Delegate=yes in the unit gives one)"
        found = cls(own)
        try:
            probe = found.new()
        except OSError as exc:
            return None, f"signals (cannot make a cgroup in {own}: {exc.strerror})"
        has_freezer = (probe.path / "cgroup.freeze").exists()
        found.retire(probe)
        if not has_freezer:
            return None, "signals (this kernel's cgroups have no freezer: Linux 5.2 or later)"
        found.sweep_gone()
        return found, f"the cgroup freezer, under {own}"

    def new(self) -> Group:
        """A cgroup of its own for one fenced process (the retired ones tried again
        first)."""
        for group in list(self._retired):
            self.retire(group)
        group = Group(self.parent / f"{PREFIX}{os.getpid()}-{next(self._numbers)}")
        group.path.mkdir(mode=0o755)
        self._made.add(group)
        return group

    def retire(self, group: Group) -> None:
        """Its process ended: removed now, or at a later `new` once the last of what it
        started is gone."""
        if group.remove():
            self._made.discard(group)
            self._retired.discard(group)
        else:
            self._retired.add(group)

    async def close(self, within: float = 2.0) -> None:
        """At the server's end: ends what is still in the cgroups it made, and removes
        them once empty (within `within` seconds; what is left, at the next start)."""
        for group in self._made:
            group.kill()
        deadline = time.monotonic() + within
        while self._made and time.monotonic() < deadline:
            for group in list(self._made):
                self.retire(group)
            if self._made:
                await asyncio.sleep(0.02)

    def sweep_gone(self) -> None:
        """Removes the empty cgroups of servers no longer running."""
        for path in self.parent.glob(f"{PREFIX}*"):
            match = OURS.fullmatch(path.name)
            if match and not running(int(match[1])):
                Group(path).remove()


def own_cgroup() -> Path | None:
    """This process's cgroup v2 directory, where the unified tree is mounted."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    relative = next((line[3:] for line in lines if line.startswith("0::")), None)
    for line in mounts:
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if relative is None or len(parts) < 5 or not rest.startswith("cgroup2 "):
            continue
        root, point = parts[3], parts[4]
        if relative == root or relative.startswith(root.rstrip("/") + "/"):
            inside = relative[len(root.rstrip("/")) :].lstrip("/")
            return Path(point.replace("\\040", " ")) / inside
    return None


def delegated(path: Path) -> bool:
    """Whether systemd marked this cgroup as delegated to the unit that runs in it."""
    for name in DELEGATED:
        with contextlib.suppress(OSError):
            if os.getxattr(path, name) == b"1":
                return True
    return False


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
