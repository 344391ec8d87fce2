"""What each mend of a dependency's private internals buys today: A/B, mend on and off.

For the mends that are about speed (mends/event_queues.py, mends/tracing.py,
mends/required_fields.py; a Hypercorn mend sending a response's head and body in one
send until issue 36 measured it within noise) it starts two tailagent servers, both
up at once: A as shipped, B with that one mend taken back out before it serves (see
OFF: the rest of the process is the same).
Each is called on one keep-alive connection, in alternating blocks (the first of a pair
alternating, as bench_load.side_by_side does): sequential SendMessage (`--call send`: a
blocking send of a new task, which bridge/requests/quick.py runs past the SDK's queues)
or SendStreamingMessage read to its end (`--call stream`: through the SDK's queues).
`--pairs` fresh pairs of servers in turn; per pair the two medians and their ratio A / B
(below 1: the mend makes a call faster), and the server's own CPU time per call (utime +
stime from /proc, summed over the blocks), which the other processes of a shared machine
move less than they move wall time. For mends/sql_stores.py, which is about memory, each
of `--pairs` fresh interpreters imports the server with and without it, interleaved, and
reads its VmRSS.

Run it from a clean tree (`git archive HEAD | tar -x -C DIR; cd DIR`): the servers
import tailagent from the working directory.

Usage: python bench/bench_mends.py [--pairs 3] [--requests 600] [--blocks 12]
    [--call send|stream] [--only none,queues,tracing,required,sql]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_core import rpc
from bench.bench_load import Server, sequential
from tests.conftest import start_server

START = "\nimport sys\nfrom tailagent.cli import run\nrun()\n"

# Each speed mend taken back out, run before the server starts; "none" takes nothing
# out, an A/A pair that shows the noise of the day.
OFF = {
    "none": "",
    "queues": (
        "import sys, tailagent\n"
        "from tailagent.mends.event_queues import COMPAT_MODULE\n"
        "sys.modules.pop(COMPAT_MODULE)\n"
    ),
    "tracing": (
        "import tailagent.mends.tracing\n"
        "tailagent.mends.tracing.untraced_unless_enabled = lambda: False\n"
    ),
    "required": (
        "from a2a.utils import proto_utils\n"
        "from tailagent.mends import required_fields\n"
        "proto_utils._validate_proto_required_fields_internal = required_fields.SDK_WALK\n"
    ),
}

# mends/sql_stores.py taken back out: the SDK imports its SQL stores, as without the mend.
SQL_OFF = (
    "import sys, tailagent\n"
    "from tailagent.mends.sql_stores import DEFERRED\n"
    "for name in DEFERRED: sys.modules.pop(name)\n"
)
RSS = (
    "import tailagent.server\n"
    "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS')))\n"
)


def start(tmp: Path, name: str, code: str) -> Server:
    server = start_server(tmp / name, program=("-c", code + START))
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {server.token}"}
    url = server.url.rstrip("/") + "/"
    return Server(name, url, headers, server.process.pid, server.log, server.stop)


async def streamed(server: Server, n: int, warm_up: int = 5) -> list[float]:
    """The times of n SendStreamingMessage calls, each read to its end, one after another."""
    times = []
    async with httpx.AsyncClient(headers=server.headers, timeout=30) as http:
        for i in range(warm_up + n):
            start = time.perf_counter()
            body = rpc("SendStreamingMessage", "hello")
            async with http.stream("POST", server.url, json=body) as response:
                events = [line async for line in response.aiter_lines() if line[:5] == "data:"]
            elapsed = time.perf_counter() - start
            if "TASK_STATE_COMPLETED" not in events[-1]:
                raise RuntimeError(f"the stream ended with {events[-1][:200]}")
            if i >= warm_up:
                times.append(elapsed)
    return times


def cpu_seconds(pid: int) -> float:
    """The process's CPU time so far (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def pair(mend: str, requests: int, blocks: int, call: str) -> list[float]:
    """For the server as shipped and one without `mend`: median call time (ms), then
    server CPU per call (ms), each on then off."""
    per_block = max(1, requests // blocks)
    measure = streamed if call == "stream" else sequential
    with tempfile.TemporaryDirectory() as tmp:
        servers = [start(Path(tmp), "on", ""), start(Path(tmp), "off", OFF[mend])]
        try:
            await asyncio.sleep(1.0)
            times: list[list[float]] = [[], []]
            cpu = [0.0, 0.0]
            for block in range(blocks):
                for i in (0, 1) if block % 2 == 0 else (1, 0):
                    before = cpu_seconds(servers[i].pid)
                    times[i] += await measure(servers[i], per_block, warm_up=5)
                    cpu[i] += cpu_seconds(servers[i].pid) - before
        finally:
            for server in servers:
                server.stop()
    calls = blocks * (per_block + 5)
    return [*(statistics.median(t) * 1000 for t in times), *(c / calls * 1000 for c in cpu)]


def imported_rss(code: str) -> int:
    """VmRSS (KiB) of a fresh interpreter once `code` has imported the server."""
    done = subprocess.run(
        [sys.executable, "-c", code + RSS], capture_output=True, text=True, check=True
    )
    return int(done.stdout.split()[-1])


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--call", choices=("send", "stream"), default="send")
    parser.add_argument("--only", default="queues,tracing,required,sql")
    args = parser.parse_args()
    for mend in args.only.split(","):
        if mend == "sql":
            runs = [(imported_rss(""), imported_rss(SQL_OFF)) for _ in range(args.pairs)]
            each = ", ".join(f"{on / 1024:.1f} / {off / 1024:.1f}" for on, off in runs)
            print(f"sql: server imported, VmRSS MiB on / off: {each}")
            continue
        ratios: list[tuple[float, float]] = []
        for _ in range(args.pairs):
            on, off, cpu_on, cpu_off = await pair(mend, args.requests, args.blocks, args.call)
            ratios.append((on / off, cpu_on / cpu_off))
            print(
                f"{mend}: {args.call} median on {on:.2f} ms, off {off:.2f} ms, {on / off:.2f}×;"
                f" server CPU per call on {cpu_on:.2f} ms, off {cpu_off:.2f} ms,"
                f" {cpu_on / cpu_off:.2f}×",
                flush=True,
            )
        wall, cpu = (statistics.median(r[i] for r in ratios) for i in (0, 1))
        print(f"{mend}, {args.call}: median of the ratios {wall:.2f}× wall, {cpu:.2f}× CPU")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
