"""What freezing a conversation's agent between turns costs (issue 54, section 6).

Two measures, in one run:

  - the freeze and the thaw alone (tailagent/sandbox/freezer.py) of a bwrap pid namespace
    holding 1, 10 and 50 processes (a `sleep`, as pid 1 for one; bwrap's own pid 1 and
    sleeps for more), each the median of --runs freezes and thaws, both ways: with
    signals (`Freezer`: a freeze lists the box's processes from /proc on every pass, so
    its cost grows with the box's count too: the output says how many there were) and,
    where this user may make cgroups (cgroups.py), with the cgroup v2 freezer
    (`CgroupFreezer`, the namespace started in a cgroup of its own);
  - a follow-up turn's wall time (a blocking SendMessage to its completed task, the fake
    ACP agent tests/fake_acp_agent.py) on two fenced servers up at once, one freezing and
    one not (both freezers' freeze and thaw replaced by no-ops in its own process: the
    server has no switch for it), turns sent on, off, then off, on, and so on, so both
    share the machine's noise. A fenced turn thaws the agent's namespace at its start and
    freezes it at its end (its bwrap pid 1, the network bridge, the agent: 3 processes),
    in the way the server finds on this box (the output says which).

Usage: python bench/bench_freeze.py [--runs 50] [--samples 40] [--counts 1,10,50]

Measured (2026-12-06, a 2-vCPU VM, 77 processes on the box, root, no systemd):
signals freeze 3.09 / 4.58 / 10.30 ms and thaw 0.06 / 0.37 / 1.56 ms for 1 / 10 / 50
processes; the cgroup freezer 0.31 / 0.44 / 0.79 ms and 0.21 / 0.28 / 0.65 ms; a
follow-up turn 17.01 ms freezing (by the cgroup), 14.54 ms not (+2.5 ms, paired +2.6).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_acp import FAKE, client, timed_turn
from tailagent.sandbox.cgroups import Cgroups, Group
from tailagent.sandbox.freezer import freezer_of
from tests.conftest import RunningServer, start_server

# The server that does not freeze: tailagent's own start, its Freezer made a no-op first.
NO_FREEZE = (
    "import sys\n"
    "from tailagent.sandbox import freezer\n"
    "async def freeze(self, bound=0.0): return True\n"
    "for kind in (freezer.Freezer, freezer.CgroupFreezer):\n"
    "    kind.freeze = freeze\n"
    "    kind.thaw = lambda self: 0\n"
    "from tailagent.cli import run\n"
    "sys.argv[0] = 'tailagent'\n"
    "run()\n"
)


def namespace(count: int, group: Group | None) -> subprocess.Popen[bytes]:
    """A bwrap pid namespace holding `count` processes, all asleep, in `group` if given."""
    bwrap = shutil.which("bwrap") or "/usr/bin/bwrap"
    argv = [
        *(group.entering() if group else []),
        bwrap,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
    ]
    argv += ["--unshare-pid", "--die-with-parent"]
    if count == 1:
        argv += ["--as-pid-1", "--", "sleep", "1000"]
    else:  # bwrap's pid 1, count - 2 sleeps in the background, and sh as the last sleep
        argv += [
            "--",
            "sh",
            "-c",
            f"for i in $(seq {count - 2}); do sleep 1000 & done; exec sleep 1000",
        ]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL)


async def freeze_thaw(
    count: int, runs: int, tree: Cgroups | None
) -> tuple[int, list[float], list[float]]:
    """With signals if `tree` is None, else with the cgroup freezer in a cgroup of `tree`."""
    group = tree.new() if tree is not None else None
    process = namespace(count, group)
    try:
        freezer = freezer_of(process.pid, group)
        deadline = time.monotonic() + 10
        while len(freezer.members()) < count and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)  # until every sleep has started
        found = len(freezer.members())
        freezes, thaws = [], []
        for _ in range(runs):
            start = time.perf_counter()
            assert await freezer.freeze()
            freezes.append(time.perf_counter() - start)
            start = time.perf_counter()
            freezer.thaw()
            thaws.append(time.perf_counter() - start)
            await asyncio.sleep(0.01)
        return found, freezes, thaws
    finally:
        process.kill()
        process.wait()
        if tree is not None and group is not None:
            await tree.close()


def serve(tmp: Path, frozen: bool) -> RunningServer:
    folder = tmp / ("on" if frozen else "off")
    folder.mkdir()
    program = ("-m", "tailagent") if frozen else ("-c", NO_FREEZE)
    return start_server(folder, "--agent-command", f"{sys.executable} {FAKE}", program=program)


async def turns(samples: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="fz-") as tmp:
        servers = {"on": serve(Path(tmp), True), "off": serve(Path(tmp), False)}
        try:
            clients = {side: client(server) for side, server in servers.items()}
            contexts = {}
            for side, server in servers.items():  # the first turn, not counted
                _, task = await timed_turn(clients[side], server.url, "hello")
                contexts[side] = task["contextId"]
            for index in range(samples):
                order = ("on", "off") if index % 2 == 0 else ("off", "on")
                for side in order:
                    elapsed, _ = await timed_turn(
                        clients[side], servers[side].url, "hello", contexts[side]
                    )
                    times[side].append(elapsed)
            for http in clients.values():
                await http.aclose()
        finally:
            for server in servers.values():
                server.stop()
    return times


def ms(values: list[float]) -> str:
    low, high = min(values) * 1000, max(values) * 1000
    return f"{statistics.median(values) * 1000:7.2f} ms (min {low:.2f}, max {high:.2f})"


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--counts", default="1,10,50")
    args = parser.parse_args()
    box = sum(1 for entry in os.listdir("/proc") if entry.isdigit())
    print(f"freeze and thaw of a pid namespace, median of {args.runs} ({box} processes on the box)")
    tree, freezing = Cgroups.find()
    for way, where in (("signals", None), ("cgroup", tree)):
        if way == "cgroup" and tree is None:
            print(f"  cgroup: not here, {freezing}")
            continue
        for count in (int(c) for c in args.counts.split(",")):
            found, freezes, thaws = await freeze_thaw(count, args.runs, where)
            print(f"  {way:7s} {found:3d} processes: freeze {ms(freezes)}   thaw {ms(thaws)}")
    times = await turns(args.samples)
    print(f"a follow-up turn of the fake ACP agent, fenced, median of {args.samples} each,")
    print(f"frozen by {freezing}:")
    for side in ("on", "off"):
        print(f"  freezing {side:3s}: {ms(times[side])}")
    pairs = [a - b for a, b in zip(times["on"], times["off"], strict=True)]
    more = statistics.median(times["on"]) - statistics.median(times["off"])
    paired = statistics.median(pairs)
    print(f"  on less off: {more * 1000:+.2f} ms; paired median {paired * 1000:+.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
