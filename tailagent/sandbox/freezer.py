"""Between turns nothing of an agent runs: its fence's processes, stopped together.

Without this, whatever an agent leaves behind when its turn ends (a detached process, a
thread of its own) goes on working in the conversation's directory while tailagent
runs its end-of-turn checks and commits there, and for as long as the conversation
sits idle: one was seen committing in its repository 6 s after its turn ended. So
from the end of a turn until the next begins, every process of the conversation's fence
is stopped (`SIGSTOP`), and continued (`SIGCONT`) when the next turn starts, before
anything is sent to the agent.

Which processes: every fence runs in a pid namespace of its own (`bwrap
--unshare-pid`). The bwrap tailagent started stays in the server's namespace; its child
is pid 1 of the new one, and every process whose `/proc/PID/ns/pid` link names the same
namespace is the conversation's, however it left its parent (a double fork, a session of
its own): nothing leaves a pid namespace, and no fenced process can make another one
(its capabilities are dropped). The links are read rather than each process's parent
in `/proc/PID/stat`: on a box of 180 processes, 1.5 ms a pass against 15 - 40 ms (a
kernel may also lack `/proc/PID/task/*/children`). The server reads them as the agent's
own user, or as root, or as the owner of the user namespace bwrap made: an agent that
makes itself undumpable hides nothing from any of them.

How: a pass lists the tree and stops whatever of it still runs; passes repeat until
one finds the same processes as the one before, every thread of each stopped. A process
told to stop cannot finish a fork meanwhile (the kernel restarts a fork when a signal is
pending), so what a pass misses the next one finds. A freeze that does not settle within
FREEZE_BOUND (a storm of forks, a process stuck in the kernel) is not half-kept: the
caller ends the agent instead (`kill`). Each signal goes through a pidfd opened before
the process's namespace is checked again, so a number reused meanwhile is not signalled.

Where the server has a cgroup v2 tree to give (cgroups.py), each fenced process is in a
cgroup of its own instead, and `CgroupFreezer` has the kernel freeze it in one write
(`cgroup.freeze`): no passes, no signal an agent could see. Signals are for the boxes
that give none. Unfenced (`sandbox.mode = "off"`) there is no namespace to find every
process in: nothing is frozen then (a `Freezer(None)`), as nothing else is fenced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterable

from tailagent.sandbox.cgroups import Group

log = logging.getLogger("tailagent.sandbox")

FREEZE_BOUND = 2.0  # seconds a freeze may take before the agent is ended instead
FIRST_WAIT = 0.0005  # seconds between passes, doubling up to LAST_WAIT
LAST_WAIT = 0.02
# A thread's state letters that run no code of the agent's: stopped, traced, zombie, dead.
STILL = frozenset("TtZXx")


def _stat(pid: int | str, task: int | str | None = None) -> tuple[str, int] | None:
    """(state, parent pid) of a process or one of its threads; None once it is gone."""
    path = f"/proc/{pid}/stat" if task is None else f"/proc/{pid}/task/{task}/stat"
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError:
        return None
    # The name in parentheses may hold spaces and ')': the fields follow the last one.
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) < 2:
        return None
    return fields[0].decode(), int(fields[1])


def _namespace_of(pid: int | str) -> str | None:
    """The pid namespace `pid` is in ("pid:[4026532291]"); None once it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def _pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _still(pid: int) -> bool:
    """True when no thread of `pid` runs (stopped, or gone). Every thread is read: a
    process whose first thread has exited shows as a zombie while the others run."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for task in tasks:
        stat = _stat(pid, task)
        if stat is not None and stat[0] not in STILL:
            return False
    return True


def _send(pid: int, namespace: str, signum: int) -> None:
    """`signum` to `pid` if it is still in `namespace`: checked through a pidfd opened
    first, so a number reused meanwhile by a process elsewhere is not signalled."""
    try:
        handle = os.pidfd_open(pid)
    except OSError:
        return  # gone
    try:
        if _namespace_of(pid) == namespace:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(handle, signum)
    finally:
        os.close(handle)


def namespaced(options: Iterable[str]) -> bool:
    """Whether a fence's bwrap options give it a pid namespace of its own."""
    return "--unshare-pid" in options


class Freezer:
    """The processes of one fence's pid namespace, the one whose pid 1 is a child of
    the bwrap at `root` (None: nothing to freeze, an unfenced agent), stopped and
    continued together.

    `freeze` and `thaw` may cross: a thaw while a freeze is still in its passes ends the
    freeze where it is (it stops nothing more) and continues everything."""

    def __init__(self, root: int | None) -> None:
        self.root = root
        self.frozen = False
        self._generation = 0
        self._init: int | None = None  # the namespace's pid 1, as the server numbers it
        self._namespace: str | None = None
        self._stopped: list[int] = []  # what the last completed freeze stopped

    def namespace(self) -> str | None:
        """The namespace under `root`, found once and checked again each time (its pid
        1 still the root's child): a namespace's number is used again once it is gone."""
        if self.root is None:
            return None
        init = self._init
        if init is not None:
            stat = _stat(init)
            if stat is not None and stat[1] == self.root and _namespace_of(init) == self._namespace:
                return self._namespace
            self._init = self._namespace = None
        own = _namespace_of(self.root)
        for pid in _pids():
            found = _namespace_of(pid)
            if found in (None, own):
                continue
            if (stat := _stat(pid)) is not None and stat[1] == self.root:
                self._init, self._namespace = pid, found
                return found
        return None

    def members(self) -> list[int]:
        """The namespace's processes now."""
        namespace = self.namespace()
        if namespace is None:
            return []
        return [pid for pid in _pids() if _namespace_of(pid) == namespace]

    async def freeze(self, bound: float = FREEZE_BOUND) -> bool:
        """Stops every process of the namespace. True once a pass found them all
        stopped (or none there, or a thaw came meanwhile); False when they did not
        settle within `bound`: the caller ends them instead."""
        namespace = self.namespace()
        if namespace is None:
            return True
        self._generation += 1
        generation = self._generation
        self.frozen = True
        self._stopped = []
        deadline = time.monotonic() + bound
        wait = FIRST_WAIT
        before: list[int] | None = None
        while True:
            members = self.members()
            running = [pid for pid in members if not _still(pid)]
            if not running and before == members:
                self._stopped = members
                return True
            for pid in running:
                _send(pid, namespace, signal.SIGSTOP)
            before = members
            if time.monotonic() > deadline:
                log.warning(
                    "the fence of %s did not stop within %.1f s (%d still running)",
                    self.root, bound, len(running),
                )  # fmt: skip
                return False
            await asyncio.sleep(wait)
            wait = min(wait * 2, LAST_WAIT)
            if generation != self._generation:
                return True  # thawed meanwhile: that thaw continued everything

    def thaw(self) -> int:
        """Continues every process of the namespace; synchronous, so that nothing is
        written to the agent before it runs again. After a completed freeze that is the
        set it stopped (none of them could fork since); after one cut short, the
        namespace as it is now. Returns how many were continued."""
        if not self.frozen or (namespace := self._namespace) is None:
            return 0
        self._generation += 1
        self.frozen = False
        members, self._stopped = self._stopped or self.members(), []
        for pid in members:
            _send(pid, namespace, signal.SIGCONT)
        return len(members)

    def kill(self) -> None:
        """SIGKILL to the namespace (a stopped process dies of it too)."""
        namespace = self.namespace()
        self._generation += 1
        self.frozen = False
        self._stopped = []
        if namespace is not None:
            for pid in self.members():
                _send(pid, namespace, signal.SIGKILL)


class CgroupFreezer:
    """A fence's processes in a cgroup of their own (cgroups.py), frozen and continued
    by the kernel: what `Freezer` does with signals, in one write each way.

    `freeze` and `thaw` may cross as `Freezer`'s do: a thaw while a freeze waits for the
    kernel to report the cgroup frozen ends that wait."""

    def __init__(self, group: Group) -> None:
        self.group = group
        self.frozen = False
        self._generation = 0

    def members(self) -> list[int]:
        return self.group.pids()

    async def freeze(self, bound: float = FREEZE_BOUND) -> bool:
        """True once the kernel says every process in the cgroup is frozen (or it is
        gone, or a thaw came meanwhile); False when that did not come within `bound` (a
        process stuck in the kernel): the caller ends them instead."""
        self._generation += 1
        generation = self._generation
        self.frozen = True
        try:
            self.group.freeze(True)
        except OSError:
            return True  # the cgroup is gone, and all that was in it
        deadline = time.monotonic() + bound
        wait = FIRST_WAIT
        while not self.group.frozen():
            if time.monotonic() > deadline:
                log.warning("%s did not freeze within %.1f s", self.group.path, bound)
                return False
            await asyncio.sleep(wait)
            wait = min(wait * 2, LAST_WAIT)
            if generation != self._generation:
                return True  # thawed meanwhile
        return True

    def thaw(self) -> int:
        """Continues the cgroup; synchronous, so nothing is written to the agent before
        it runs again. Returns how many processes it holds."""
        if not self.frozen:
            return 0
        self._generation += 1
        self.frozen = False
        with contextlib.suppress(OSError):
            self.group.freeze(False)
        return len(self.group.pids())

    def kill(self) -> None:
        self._generation += 1
        self.frozen = False
        self.group.kill()


def freezer_of(root: int | None, group: Group | None) -> Freezer | CgroupFreezer:
    """What freezes the fence whose bwrap is `root`: its cgroup where it has one, else
    signals to its pid namespace."""
    return CgroupFreezer(group) if group is not None else Freezer(root)
