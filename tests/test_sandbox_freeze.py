"""Between turns nothing of the agent runs (issue 54, section 6): tried through a real
server with an agent that leaves work behind when its turn ends.

The hostile agent (tests/hostile_acp_agent.py, and the fake Claude CLI's `attack`) leaves
a detached process (its own session, its parent gone) and a thread of its own appending
to files in the conversation's directory every 100 ms. From outside: once the turn
ends, neither file grows and each process of the fence is held: frozen in its cgroup
(the cgroup v2 freezer, where the server may make cgroups) or `State: T (stopped)`; the next
turn continues them (the files grow again) and completes; a turn parked on a person is
frozen too and a cancel still ends it; a server stop leaves no process of them behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailagent.sandbox import cgroups
from tests.a2a_helpers import A2A, Turn, data_parts, state_name, texts, user_message
from tests.conftest import RunningServer
from tests.test_isolation import make_project
from tests.test_sandbox import (
    DB_PASSWORD,
    FAKE_CLI,
    attempt,
    claude_attempt,
    got_through,
    make_home,
    start_fenced,
    two_people,
)

LINGER = {"linger": ["grow.txt"], "linger_thread": ["thread.txt"]}
SLEEP = {"run": ["sleep 1"]}  # a turn long enough for what it thawed to show it runs


def commands() -> dict[int, str]:
    """Every process's command line, read from outside any fence."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                raw = Path(f"/proc/{entry}/cmdline").read_bytes()
                found[int(entry)] = raw.replace(b"\0", b" ").decode(errors="replace")
    return found


def descendants(root: int) -> set[int]:
    """Every process under `root`, from each one's parent in /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = Path(f"/proc/{entry}/stat").read_bytes()
                parent = int(stat[stat.rfind(b")") + 2 :].split()[1])
                children.setdefault(parent, []).append(int(entry))
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def pids_of(server: RunningServer, marker: str) -> set[int]:
    """The server's fenced processes whose command line holds `marker`: under the
    server, in a pid namespace other than the test's (not the bwrap the server started,
    which names the agent too). Other servers' agents on the box are not counted."""
    own = os.readlink("/proc/self/ns/pid")
    lines = commands()
    found = set()
    for pid in descendants(server.process.pid):
        with contextlib.suppress(OSError):
            if marker in lines.get(pid, "") and os.readlink(f"/proc/{pid}/ns/pid") != own:
                found.add(pid)
    return found


def state(pid: int) -> str:
    """`State:` of /proc/PID/status ("T (stopped)"), or "gone"."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "gone"
    [line] = [line for line in status.splitlines() if line.startswith("State:")]
    state = line.split(":", 1)[1].strip()
    return "gone" if state.startswith(("Z", "X")) else state


def cgroup_of(pid: int) -> Path | None:
    """The cgroup v2 directory `pid` is in, read from outside; None if it is gone or
    there is no cgroup v2 tree."""
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    found = [line.split(" - ")[0].split()[4] for line in mounts if " - cgroup2 " in line]
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    relative = next((line[3:] for line in lines if line.startswith("0::")), None)
    return Path(found[0]) / relative.lstrip("/") if found and relative else None


def held(pid: int) -> str:
    """How `pid` is kept from running: "frozen" (its cgroup frozen by the kernel),
    "stopped" (SIGSTOP), else its state ("S (sleeping)"), or "gone"."""
    cgroup = cgroup_of(pid)
    with contextlib.suppress(OSError):
        if cgroup is not None and "frozen 1" in (cgroup / "cgroup.events").read_text().split("\n"):
            return "frozen"
    now = state(pid)
    return "stopped" if now == "T (stopped)" else now


# How a server run by this user on this box freezes its agents: the cgroup freezer where
# it may make cgroups (root on a box without systemd, as CI runs), else signals.
HELD = "frozen" if cgroups.Cgroups.find()[0] is not None else "stopped"


def size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def grows(path: Path, over: float = 1.0) -> bool:
    """Whether `path` grows over `over` seconds: its size read twice, from outside."""
    before = size(path)
    time.sleep(over)
    return size(path) > before


def lingering_on(said: str) -> Path:
    """The file a `linger` attempt's answer names (the directory is bound at its own path)."""
    return Path(said.removeprefix("ok: lingering on ").strip())


def all_gone(pids: set[int], within: float = 15.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if all(state(pid) == "gone" for pid in pids):
            return True
        time.sleep(0.1)
    return False


def kill_all(pids: set[int]) -> None:
    """Whatever a failed test leaves running is ended by pid (SIGKILL ends a stopped one)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def short(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short folder: the fence's unix sockets live under it (108 bytes at most)."""
    return tmp_path_factory.mktemp("fz")


@pytest.fixture
def hostile(short: Path) -> Iterator[RunningServer]:
    server = start_fenced(short, "")
    try:
        yield server
    finally:
        server.stop()


async def test_what_a_turn_leaves_behind_is_stopped_until_the_next_turn(
    hostile: RunningServer,
) -> None:
    agent = A2A(hostile.url, hostile.token)
    got, turn = await attempt(agent, LINGER)
    grow = lingering_on(got["linger grow.txt"])
    thread = grow.with_name("thread.txt")
    lingerers = pids_of(hostile, str(grow))
    agents = pids_of(hostile, "hostile_acp_agent.py")  # the conversation's, and the spare
    try:
        assert lingerers and agents
        assert not grows(grow) and not grows(thread, 0.3)
        assert {held(pid) for pid in lingerers | agents} == {HELD}
        groups = {cgroup_of(pid) for pid in lingerers | agents}
        if HELD == "frozen":  # in cgroups of the server's own, one per agent process
            assert {
                g.name.startswith(f"tailagent-{hostile.process.pid}-") for g in groups if g
            } == {True}

        before = (size(grow), size(thread))
        again, second = await attempt(agent, SLEEP, context_id=turn.context_id)
        assert second.final_state == "completed", again
        assert size(grow) > before[0] and size(thread) > before[1]  # thawed for the turn
        assert not grows(grow)  # and frozen again after it
        assert {held(pid) for pid in lingerers} == {HELD}
    finally:
        hostile.stop()
        gone = all_gone(lingerers | agents)
        kill_all(lingerers | agents)
    assert gone  # a server stop thaws and ends every one of them
    assert [g for g in groups if g is not None and g.exists()] == []  # and removes their cgroups


async def test_an_agent_cannot_leave_its_cgroup(hostile: RunningServer) -> None:
    """The agent knows where its cgroup is (/proc/self/cgroup) and tries to move itself
    out, to the server's own cgroup, so no freeze would reach it: /sys is read-only in
    its fence, and the process left behind is still in its own cgroup, frozen."""
    if HELD != "frozen":
        pytest.skip("this box gives the server no cgroup tree: signals freeze its agents")
    tree = cgroups.Cgroups.find()[0]
    assert tree is not None
    leave = f"echo 0 > {tree.parent}/cgroup.procs"
    got, _ = await attempt(A2A(hostile.url, hostile.token), {"run": [leave], **LINGER})
    assert got_through({k: v for k, v in got.items() if k.startswith("run ")}) == {}, got
    lingerers = pids_of(hostile, str(lingering_on(got["linger grow.txt"])))
    assert lingerers and {held(pid) for pid in lingerers} == {"frozen"}
    assert {cgroup_of(pid).parent for pid in lingerers} == {tree.parent}  # type: ignore[union-attr]


async def test_a_turn_parked_on_a_person_is_frozen_and_a_cancel_still_ends_it(
    hostile: RunningServer,
) -> None:
    agent = A2A(hostile.url, hostile.token)
    plan = {"linger": ["parked.txt"], "terminal": ["echo approved"]}
    first = await agent.turn(user_message(json.dumps(plan)))
    assert first.final_state == "input_required"
    assert data_parts(first.last_message)[0]["kind"] == "permission_request"
    lingerers = pids_of(hostile, "parked.txt")
    [grow] = {Path(commands()[pid].split()[-1]) for pid in lingerers}
    try:
        assert lingerers
        assert not grows(grow)  # the agent waits on the person: nothing of it runs
        assert {held(pid) for pid in lingerers} == {HELD}
        canceled = await asyncio.wait_for(agent.cancel(first.task_id), timeout=30)
        assert state_name(canceled.status.state) == "canceled"
        next_turn = await agent.turn(user_message("{}", context_id=first.context_id))
        assert next_turn.final_state == "completed"
        assert not grows(grow)
    finally:
        hostile.stop()
        gone = all_gone(lingerers)
        kill_all(lingerers)
    assert gone


def test_a_spare_waits_frozen(hostile: RunningServer) -> None:
    """The process started ahead for the next conversation stops once it is ready."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        spares = pids_of(hostile, "hostile_acp_agent.py")
        if spares and {held(pid) for pid in spares} == {HELD}:
            return
        time.sleep(0.1)
    raise AssertionError({pid: held(pid) for pid in pids_of(hostile, "hostile_acp_agent.py")})


async def claude_turn(
    agent: A2A, plan: dict[str, list[str]], context_id: str | None = None
) -> tuple[dict[str, str], Turn]:
    turn = await agent.turn(user_message("attack " + json.dumps(plan), context_id=context_id))
    assert turn.final_state == "completed", texts(turn.last_message)
    said = "".join(texts(a.artifact) for a in turn.artifacts("response"))
    return json.loads(said[said.index("{") :]), turn


async def test_claude_code_is_frozen_between_turns_too(short: Path) -> None:
    tmp_path = short
    home = Path(tempfile.mkdtemp(prefix="tailagent-home-", dir="/var/tmp"))
    make_home(home)
    (home / ".claude" / ".credentials.json").write_text('{"claudeAiOauth": "the owner\'s"}')
    make_project(tmp_path / "workspace")
    config = tmp_path / "tailagent.toml"
    config.write_text(f'[claude]\ncli_path = "{FAKE_CLI}"\n')
    env = {**os.environ, "HOME": str(home), "DB_PASSWORD": DB_PASSWORD}
    with two_people(tmp_path, home, env, "--agent", "claude", "--config", str(config)) as box:
        got, turn = await claude_turn(box.alice, {"linger": ["grow.txt"]})
        grow = lingering_on(got["linger grow.txt"])
        lingerers = pids_of(box.server, str(grow))
        clis = pids_of(box.server, str(FAKE_CLI))
        try:
            assert lingerers and clis
            assert not grows(grow)
            assert {held(pid) for pid in lingerers | clis} == {HELD}
            before = size(grow)
            # Another conversation's turn: Alice's stays frozen meanwhile.
            await claude_attempt(box.bob, SLEEP)
            assert size(grow) == before
            # Her next turn thaws hers, and it is frozen again after.
            await claude_turn(box.alice, SLEEP, turn.context_id)
            assert size(grow) > before and not grows(grow)
            assert {held(pid) for pid in lingerers} == {HELD}
        finally:
            box.server.stop()
            gone = all_gone(lingerers | clis)
            kill_all(lingerers | clis)
        assert gone


async def test_unfenced_nothing_is_frozen(short: Path) -> None:
    """sandbox.mode = "off": no pid namespace holds every process of the agent, so
    nothing is frozen (what off means, said everywhere else too)."""
    server = start_fenced(short, '[sandbox]\nmode = "off"\n')
    lingerers: set[int] = set()
    try:
        got, _ = await attempt(A2A(server.url, server.token), {"linger": ["grow.txt"]})
        grow = lingering_on(got["linger grow.txt"])
        # In the server's own namespace: found by its command line alone.
        lingerers = {pid for pid, line in commands().items() if str(grow) in line}
        assert lingerers and grows(grow)
    finally:
        server.stop()
        kill_all(lingerers)
