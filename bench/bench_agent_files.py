"""What an agent's file attacks do to a real server, with tests/fake_acp_agent.py as
the agent (docs/security.md quotes the figures, before and after issue 32).

Measures, each against a fresh server:
  - a read of a FIFO, and of a 400 MiB sparse file (whole, and its first line): the
    server's peak memory (VmHWM) before and after, and the longest a /healthz waited
    while the turn ran (waiting at most --wait seconds);
  - a read of an 8 MiB file, which the agent then says back as its answer;
  - a directory swapped for a symlink to a directory outside while the agent reads a
    file in it through ACP --reads times: what the reads got;
  - the time to "serving on" without secrets in the environment and with TS_AUTHKEY
    (which makes the server exec itself again without it), the median of --samples.

Usage: python bench/bench_agent_files.py [--wait 60] [--reads 3000] [--samples 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.a2a_helpers import A2A
from tests.processes import status_kib
from tests.test_acp import answer_text, start_acp


async def attack(prompt: str, wait: float, prepare: str = "") -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-files-"))
    server = start_acp(tmp)
    try:
        agent = A2A(server.url, server.token)
        if prepare:
            await agent.turn(prepare)
        before = status_kib(server.process.pid, "VmHWM") or 0
        turn = asyncio.ensure_future(agent.turn(prompt))
        slowest, started = 0.0, time.monotonic()
        async with httpx.AsyncClient() as http:
            while not turn.done() and time.monotonic() - started < wait:
                asked = time.monotonic()
                with contextlib.suppress(httpx.TimeoutException):
                    await http.get(server.url + "/healthz", timeout=wait)
                slowest = max(slowest, time.monotonic() - asked)
                await asyncio.sleep(0.05)
        after = status_kib(server.process.pid, "VmHWM") or 0
        ended = "ended" if turn.done() else f"still running after {wait:.0f} s"
        print(
            f"{prompt[:60]!r}: VmHWM {before // 1024} -> {after // 1024} MiB, "
            f"slowest /healthz {slowest:.2f} s, turn {ended}"
        )
        turn.cancel()
    finally:
        server.process.kill()
        server.process.wait()


async def race(reads: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-race-"))
    outside = tmp / "outside"
    outside.mkdir()
    (outside / "f").write_text("outside secret\n")
    server = start_acp(tmp)
    try:
        answer = answer_text(
            await A2A(server.url, server.token).turn(f"race:swapped:{outside} {reads}")
        )
        print(f"{reads} reads during the swap: {answer.splitlines()[0]}")
    finally:
        server.process.kill()
        server.process.wait()


def time_to_serve(env: dict[str, str]) -> float:
    tmp = Path(tempfile.mkdtemp(prefix="bench-start-"))
    (tmp / "ws").mkdir()
    log = tmp / "log"
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "tailagent", "serve", "--agent", "echo", "--listen",
         "127.0.0.1:0", "--state-dir", str(tmp / "s"), "--cwd", str(tmp / "ws")],
        env=env, stdout=log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    while "serving on" not in log.read_text():
        time.sleep(0.01)
    took = time.monotonic() - started
    process.terminate()
    process.wait()
    return took


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--wait", type=float, default=60.0)
    parser.add_argument("--reads", type=int, default=3000)
    parser.add_argument("--samples", type=int, default=5)
    args = parser.parse_args()
    await attack("fifo:pipe read:pipe", args.wait)
    await attack("sparse:s.bin:419430400 read:s.bin read:s.bin:1:1", args.wait)
    await attack("read:f.txt", args.wait, f"write:f.txt:{8 * 1024 * 1024}")
    await race(args.reads)
    plain = {k: v for k, v in os.environ.items() if not k.startswith("TAILAGENT_")}
    plain.pop("TS_AUTHKEY", None)
    for name, env in (("no secrets", plain), ("TS_AUTHKEY set", {**plain, "TS_AUTHKEY": "x"})):
        runs = [time_to_serve(env) for _ in range(args.samples)]
        print(f"time to serving on, {name}: median {statistics.median(runs):.2f} s")


if __name__ == "__main__":
    asyncio.run(main())
