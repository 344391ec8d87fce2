"""Each fenced agent in a cgroup of its own (tailagent/sandbox/cgroups.py), on this box's
real cgroup v2 tree: a process enters by the fence's own prefix and all it forks is born
inside; the kernel freezes and thaws the lot in one write and ends it in one; a server
removes its cgroups once empty, and at its start those of servers gone, never another
running server's; a user who may not write the tree is told so and gets signals.

tests/test_sandbox_freeze.py tries the same through a real server and a hostile agent.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailagent.sandbox.cgroups import PREFIX, Cgroups, Group, own_cgroup
from tailagent.sandbox.freezer import CgroupFreezer
from tests.test_sandbox_freeze import held, state

REPO = Path(__file__).resolve().parent.parent


def why_not() -> str | None:
    if own_cgroup() is None:
        return "no cgroup v2 tree on this box"
    if Cgroups.find()[0] is None:
        return f"this user may not make cgroups here: {Cgroups.find()[1]}"
    return None


pytestmark = pytest.mark.skipif(why_not() is not None, reason=str(why_not()))


@pytest.fixture
def tree() -> Iterator[Cgroups]:
    found, _ = Cgroups.find()
    assert found is not None
    yield found
    asyncio.run(found.close())


def family(group: Group) -> subprocess.Popen[bytes]:
    """A shell that entered `group` by the fence's prefix and then forked two sleeps, one
    of them in a session of its own (as an agent leaves one behind)."""
    script = "sleep 1000 & setsid sleep 1000 & wait"
    return subprocess.Popen([*group.entering(), "sh", "-c", script])


def members(group: Group, count: int) -> list[int]:
    deadline = time.monotonic() + 10
    while len(group.pids()) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return group.pids()


def test_what_a_fenced_process_forks_is_born_in_its_cgroup_and_frozen_with_it(
    tree: Cgroups,
) -> None:
    group = tree.new()
    assert group.path.parent == tree.parent
    assert group.path.name.startswith(f"{PREFIX}{os.getpid()}-")
    shell = family(group)
    try:
        pids = members(group, 3)  # sh -c and its two sleeps (setsid execs its own)
        assert shell.pid in pids and len(pids) == 3, pids
        freezer = CgroupFreezer(group)
        assert asyncio.run(freezer.freeze())
        assert {held(pid) for pid in pids} == {"frozen"}
        assert freezer.thaw() == 3
        assert "frozen" not in {held(pid) for pid in pids}
        assert asyncio.run(freezer.freeze())
        freezer.kill()  # frozen, and ended all the same
        assert shell.wait(timeout=10) == -9
        assert _emptied(group)
    finally:
        group.kill()
        shell.wait(timeout=10)
    tree.retire(group)
    assert _gone(group.path)


def _emptied(group: Group, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while group.pids() and time.monotonic() < deadline:
        time.sleep(0.02)
    return not group.pids()


def _gone(path: Path, within: float = 5.0) -> bool:
    deadline = time.monotonic() + within
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return not path.exists()


def test_a_cgroup_still_holding_a_process_is_removed_once_empty(tree: Cgroups) -> None:
    group = tree.new()
    sleeper = subprocess.Popen([*group.entering(), "sleep", "1000"])
    try:
        assert members(group, 1) == [sleeper.pid]
        tree.retire(group)  # its process is not gone: kept, and tried again later
        assert group.path.exists()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert _emptied(group)
    other = tree.new()  # the next one made tries the retired ones first
    assert not group.path.exists()
    tree.retire(other)
    assert not other.path.exists()


def test_close_ends_what_is_left_and_removes_every_cgroup_it_made(tree: Cgroups) -> None:
    groups = [tree.new() for _ in range(3)]
    shells = [family(group) for group in groups]
    for group in groups:
        members(group, 3)
    asyncio.run(tree.close())
    for shell in shells:
        assert shell.wait(timeout=10) == -9
    assert [group.path for group in groups if group.path.exists()] == []


def test_a_start_sweeps_the_empty_cgroups_of_servers_gone_only(tree: Cgroups) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid no process has now
    theirs = tree.parent / f"{PREFIX}{gone.pid}-1"
    running = subprocess.Popen(["sleep", "1000"])
    alive = tree.parent / f"{PREFIX}{running.pid}-1"
    try:
        theirs.mkdir()
        alive.mkdir()
        Cgroups.find()  # another server's start
        assert not theirs.exists()
        assert alive.exists()  # a running server's, even empty: it may be about to use it
    finally:
        running.kill()
        running.wait()
        for path in (theirs, alive):
            if path.exists():
                path.rmdir()


def test_a_user_who_may_not_write_the_tree_gets_signals_and_is_told_why() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root, to run the check as nobody with runuser")
    pwd.getpwnam("nobody")
    done = subprocess.run(
        ["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c",
         "from tailagent.sandbox.cgroups import Cgroups; found, said = Cgroups.find(); "
         "print(found is None, said)"],
        capture_output=True, text=True, timeout=30,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("True signals ("), done.stdout
    assert "is not this user's to write)" in done.stdout, done.stdout


def test_a_frozen_process_is_not_stopped_by_a_signal(tree: Cgroups) -> None:
    """The kernel freezes it without a signal: nothing an agent (or its parent waiting
    with WUNTRACED) could see, unlike SIGSTOP."""
    group = tree.new()
    sleeper = subprocess.Popen([*group.entering(), sys.executable, "-c", "input()"],
                               stdin=subprocess.PIPE)  # fmt: skip
    try:
        [pid] = members(group, 1)
        freezer = CgroupFreezer(group)
        assert asyncio.run(freezer.freeze())
        assert held(pid) == "frozen" and state(pid) != "T (stopped)"
        freezer.thaw()
    finally:
        sleeper.kill()
        sleeper.wait()
        _emptied(group)
        tree.retire(group)
