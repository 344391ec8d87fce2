"""What the sandbox costs a new conversation's first turn (issue 41): mode on against off.

For each agent it starts two tailagent servers, both up at once, on the same kind of
workspace (a git repository of --files files, one commit, `--isolation worktree`), one
with `[sandbox] mode = "on"` and one with `mode = "off"`, and sends each --samples first
messages of NEW conversations (a blocking SendMessage read to its completed task), in
turns: on, off, then off, on, and so on, so both share the machine's noise. Each server
first serves --warm-up conversations that are not counted. The agents:

  - echo: it runs in the server's process, so it has no fence (the sandbox says "none
    needed"): the control, which should show no difference;
  - the fake ACP agent (tests/fake_acp_agent.py) with the default warm spare
    (agent.warm_spares = 1): fenced, the spare starts in the worktree made ahead for the
    next conversation, inside its bwrap, and the first turn takes it;
  - the same with agent.warm_spares = 0 (`cold` in --only): each first turn starts its
    agent process (bwrap or not) and its handshake, so on less off is what the fence adds
    to an agent process's start.

Between conversations it sleeps --settle seconds (1.5 by default; 0.5 with no spare), for
the server to make the next worktree ahead and start the next spare in it. Each fake
ACP turn says which process answered it and when that process started (its start time
from /proc, which no pid namespace changes); a first turn whose process started after the
message was sent did not find a warm spare, and is counted as "cold" in the output.
Beside each turn's time it reads, from /proc, the CPU time the server and its descendants
(git, the agents, their bwraps) spent over the turn and the settle after it: what a new
conversation costs the box, its replacement spare included, which the other processes
of a shared machine move less than they move wall time (median per mode, ms).
agent.max_processes is raised to --samples + --warm-up + 2, so no first turn also closes
an idle conversation's process to make room (at the default of 8 it would, from the
ninth on).

Run it from a clean tree (`git worktree add --detach DIR HEAD`): the servers import
tailagent from the working directory.

Usage: python bench/bench_sandbox.py [--samples 20] [--warm-up 1] [--settle 1.5]
    [--cold-settle 0.5] [--files 100] [--only echo,warm,cold]
Prints per agent and mode the median, min and max (ms), on less off and on / off, and the
median of the differences between the on and off turns sent one after the other (the
pairs share the load of their moment, which on a shared machine moves more than that).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_acp import FAKE, client, timed_turn
from bench.bench_core import check_isolation, isolated, load
from tests.conftest import RunningServer, start_server

MODES = ("on", "off")
# What the server's log says of its fence, by agent and mode: a server that is not
# fenced as asked is not timed.
FENCE_LOG = {
    ("echo", "on"): "sandbox: none needed",
    ("echo", "off"): "sandbox: none needed",
    ("acp", "on"): "sandbox: on (bubblewrap",
    ("acp", "off"): "sandbox: OFF (sandbox.mode = off)",
}
PROCESS = re.compile(r"in process (\d+)\.(\d+)")
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Side:
    mode: str
    server: RunningServer
    http: httpx.AsyncClient
    times: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    cold: int = 0  # fake ACP first turns whose agent process was not a warm spare


def serve(tmp: Path, agent: str, mode: str, spares: int, files: int, count: int) -> Side:
    folder = tmp / mode
    folder.mkdir()
    config = folder / "c.toml"
    config.write_text(
        f'[agent]\nwarm_spares = {spares}\nmax_processes = {count}\n\n[sandbox]\nmode = "{mode}"\n'
    )
    chosen = (
        ("--agent", "echo") if agent == "echo" else ("--agent-command", f"{sys.executable} {FAKE}")
    )
    extra = (*chosen, "--config", str(config), *isolated(folder, "worktree", files))
    server = start_server(folder, *extra)
    check_isolation(server, "worktree")
    if FENCE_LOG[agent, mode] not in server.log():
        server.stop()
        raise SystemExit(f"the server is not fenced as {mode}:\n{server.log()}")
    return Side(mode, server, client(server))


def answer_text(task: dict[str, Any]) -> str:
    """Every text the completed task holds (its artifacts and its status message)."""
    parts = [p for a in task.get("artifacts", []) for p in a.get("parts", [])]
    parts += task["status"].get("message", {}).get("parts", [])
    return " ".join(str(p.get("text", "")) for p in parts)


def started_before(task: dict[str, Any], sent: float) -> bool:
    """Whether the fake ACP process that answered started before the message was sent
    (by CLOCK_BOOTTIME, the clock of /proc's start times): a warm spare."""
    match = PROCESS.search(answer_text(task))
    if match is None:
        raise RuntimeError(f"no process named in the answer: {answer_text(task)[:300]}")
    return int(match.group(2)) / TICK < sent - 2 / TICK


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of a process and its descendants, their reaped
    children's included: a child's time moves to its parent's when it is reaped, so the
    sum only grows (the server's git commands, the agents, their bwraps)."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue  # gone while we looked
    return total / TICK


async def conversation(side: Side, agent: str, settle: float) -> tuple[float, float]:
    """A new conversation's first turn, then `settle` seconds for the server to make
    ready for the next: the turn's time, and the CPU time of the server and its
    descendants over both (what the turn cost, with the next spare's start)."""
    cpu = tree_cpu(side.server.process.pid)
    sent = time.clock_gettime(time.CLOCK_BOOTTIME)
    elapsed, task = await timed_turn(side.http, side.server.url, "hello")
    if agent == "acp" and not started_before(task, sent):
        side.cold += 1
    await asyncio.sleep(settle)
    return elapsed, tree_cpu(side.server.process.pid) - cpu


async def compare(
    agent: str, spares: int, samples: int, warm_up: int, settle: float, files: int
) -> dict[str, Side]:
    """`samples` timed first turns on each of an on and an off server, in turns."""
    count = samples + warm_up + 2
    with tempfile.TemporaryDirectory() as tmp:
        sides = {m: serve(Path(tmp), agent, m, spares, files, count) for m in MODES}
        try:
            await asyncio.sleep(max(settle, 1.0))
            for side in sides.values():
                for _ in range(warm_up):
                    await conversation(side, agent, settle)
                side.cold = 0
            for n in range(samples):
                for mode in MODES if n % 2 == 0 else MODES[::-1]:
                    elapsed, cpu = await conversation(sides[mode], agent, settle)
                    sides[mode].times.append(elapsed)
                    sides[mode].cpu.append(cpu)
        finally:
            for side in sides.values():
                await side.http.aclose()
                side.server.stop()
    return sides


def ms(value: float) -> str:
    return f"{value * 1000:.1f}"


def report(label: str, sides: dict[str, Side], agent: str) -> None:
    for mode, side in sides.items():
        t = side.times
        cold = f"   cold {side.cold}/{len(t)}" if agent == "acp" else ""
        print(
            f"{label:<28}{mode:>4}  median {ms(statistics.median(t)):>7}  "
            f"min {ms(min(t)):>7}  max {ms(max(t)):>7}  "
            f"CPU per conversation {ms(statistics.median(side.cpu)):>6}{cold}"
        )
    cpu_on, cpu_off = (statistics.median(sides[m].cpu) for m in MODES)
    on, off = (statistics.median(sides[m].times) for m in MODES)
    pairs = zip(sides["on"].times, sides["off"].times, strict=True)
    paired = statistics.median(a - b for a, b in pairs)
    print(
        f"{label:<28}      on - off {(on - off) * 1000:+.1f} ms, on / off {on / off:.2f}x, "
        f"median of the {len(sides['on'].times)} paired differences {paired * 1000:+.1f} ms; "
        f"CPU on - off {(cpu_on - cpu_off) * 1000:+.1f} ms"
    )


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--warm-up", type=int, default=1)
    parser.add_argument("--settle", type=float, default=1.5)
    parser.add_argument("--cold-settle", type=float, default=0.5)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--only", default="echo,warm,cold", help="which of echo,warm,cold")
    args = parser.parse_args()
    every = {
        "echo": ("echo (control)", "echo", 1, args.settle),
        "warm": ("fake ACP, warm spare", "acp", 1, args.settle),
        "cold": ("fake ACP, no spare", "acp", 0, args.cold_settle),
    }
    runs = [every[name] for name in args.only.split(",")]
    print(
        f"first turn of a new conversation, {args.samples} per mode ({args.warm_up} not "
        f"counted), --isolation worktree on {args.files} files, {args.settle} s between "
        f"({args.cold_settle} s with no spare); load at the start: {load()}",
        flush=True,
    )
    loads = []
    for label, agent, spares, settle in runs:
        sides = await compare(agent, spares, args.samples, args.warm_up, settle, args.files)
        report(label, sides, agent)
        loads.append(load())
        sys.stdout.flush()
    print(f"load after each agent: {' | '.join(loads)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
