"""Two revisions of tailagent side by side: SendMessage on the echo agent, the server's
CPU time per request and the client's latency, in alternating blocks.

On a shared machine a server's latency drifts by tens of percent within a minute, so a
change of a few percent cannot be read from two runs one after the other. Here both
revisions serve at once (each from a git worktree of its own, on this interpreter and
its installed dependencies), each block of requests goes to one then the other, the
first of a pair alternating, and the server process's own CPU time (utime + stime from
/proc) is counted around each block: the steadier figure of the two.

Usage: python bench/bench_revisions.py BASE [NEW] [--blocks 40] [--requests 50]
BASE and NEW are git revisions (NEW: the working tree when left out).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_core import rpc
from tests.conftest import RunningServer, start_server

ROOT = Path(__file__).resolve().parent.parent
WARM_UP = 5  # untimed requests at the start of each block


def serving_from(root: Path) -> tuple[str, ...]:
    """The interpreter arguments that run `tailagent` from the checkout at `root`."""
    code = (
        f"import sys; sys.path.insert(0, {str(root)!r}); import runpy; "
        "sys.argv = ['tailagent', *sys.argv[1:]]; "
        "runpy.run_module('tailagent', run_name='__main__')"
    )
    return ("-c", code)


def cpu_seconds(pid: int) -> float:
    """The process's user and system time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def block(server: RunningServer, n: int) -> list[float]:
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {server.token}"}
    url = server.url.rstrip("/") + "/"
    times = []
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        for i in range(WARM_UP + n):
            start = time.perf_counter()
            reply = await http.post(url, json=rpc("SendMessage", "hello"))
            if i >= WARM_UP:
                times.append(time.perf_counter() - start)
            state = reply.json()["result"]["task"]["status"]["state"]
            if state != "TASK_STATE_COMPLETED":
                raise RuntimeError(f"SendMessage ended in {state}")
    return times


def worktree(tmp: Path, revision: str) -> Path:
    path = tmp / revision.replace("/", "_")
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), revision],
        check=True,
    )
    return path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("base")
    parser.add_argument("new", nargs="?")
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--requests", type=int, default=50, help="timed requests a block")
    args = parser.parse_args()
    names = [args.base, args.new or "working tree"]
    times: list[list[float]] = [[], []]
    cpu = [0.0, 0.0]
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        made: list[Path] = []  # the worktrees to remove, however the run ends
        servers: list[RunningServer] = []
        try:
            made.append(worktree(tmp, args.base))
            if args.new:
                made.append(worktree(tmp, args.new))
            for i, root in enumerate([*made, ROOT][:2]):
                servers.append(start_server(tmp / f"server-{i}", program=serving_from(root)))
            for number in range(args.blocks):
                for i in (0, 1) if number % 2 == 0 else (1, 0):
                    before = cpu_seconds(servers[i].process.pid)
                    times[i] += asyncio.run(block(servers[i], args.requests))
                    cpu[i] += cpu_seconds(servers[i].process.pid) - before
        finally:
            for server in servers:
                server.stop()
            for root in made:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                                str(root)], check=False)  # fmt: skip
    served = args.blocks * (WARM_UP + args.requests)
    print(f"$ {shlex.join(['python', *sys.argv])}")
    for name, spent, latencies in zip(names, cpu, times, strict=True):
        print(f"{name:>14}: CPU {spent / served * 1e6:6.0f} us/request, "
              f"median {statistics.median(latencies) * 1000:.2f} ms")  # fmt: skip
    print(
        f"{'new / base':>14}: CPU {cpu[1] / cpu[0]:.3f}, "
        f"median {statistics.median(times[1]) / statistics.median(times[0]):.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
