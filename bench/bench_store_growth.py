"""How big one caller can make the store, at the per-person limits (store/keeping.py).

A real tailagent server on loopback with tests/fake_acp_agent.py, the limits as
configured by default (tasks_kept_per_caller 1,000, events_kept_per_caller 100,000)
unless --config-extra says otherwise. One caller (a token of its own, role caller)
runs turns as fast as it can for --minutes: --parallel conversations at once, each
turn a new task of `chunks --chunks` (200 chunks: ~206 events, the attack of issue 55).
Every --every seconds it prints the store's size as /metrics gives it (SQLite's file
and WAL, the task and event rows) and the file's and WAL's sizes apart; at the end,
the largest of each. A bound holds if the size levels off once the limits bite.

Usage: python bench/bench_store_growth.py [--minutes 60] [--parallel 4] [--chunks 200]
                                          [--every 30] [--config-extra 'KEY = VALUE']
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_load import FAKE_ACP_AGENT, Server, chunked_turn
from tests.conftest import RunningServer, start_server

MIB = 2**20


def caller_token(server: RunningServer) -> str:
    """A token of its own for the caller: a person, not the box's admin."""
    done = subprocess.run(
        [sys.executable, "-m", "tailagent", "token", "add", "flooder", "--role", "caller",
         "--state-dir", str(server.state_dir)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def file_bytes(path: str) -> float:
    try:
        return float(os.stat(path).st_size)
    except FileNotFoundError:
        return 0.0


async def store_size(url: str, admin: str) -> dict[str, float]:
    """The store's gauges from /metrics: bytes, tasks, task_events."""
    async with httpx.AsyncClient(timeout=30) as http:
        text = (await http.get(f"{url}/metrics", headers={"Authorization": admin})).text
    found = {"bytes": r"^tailagent_store_bytes (\S+)$"}
    found |= {table: rf'^tailagent_store_rows{{table="{table}"}} (\S+)$'
              for table in ("tasks", "task_events")}  # fmt: skip
    matches = {key: re.search(pattern, text, re.M) for key, pattern in found.items()}
    return {key: float(m.group(1)) if m else -1.0 for key, m in matches.items()}


async def drive(server: Server, chunks: int, until: float, counts: list[int]) -> None:
    """Turns in one conversation, each a new task, until `until`; counts ok and refused."""
    async with httpx.AsyncClient(headers=server.headers, timeout=120) as http:
        context_id = None
        while time.monotonic() < until:
            try:
                _, got, context_id = await chunked_turn(http, server, chunks, context_id)
            except (httpx.HTTPError, KeyError, ValueError):
                counts[1] += 1
                continue
            counts[0 if got == chunks else 1] += 1


async def main(minutes: float, parallel: int, chunks: int, every: float, extra: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "tailagent.toml"
        config.write_text(extra.replace("\\n", "\n") + "\n")
        running = start_server(
            Path(tmp), "--agent-command", shlex.join(FAKE_ACP_AGENT), "--config", str(config)
        )
        db = running.state_dir / "tailagent.db"
        admin = f"Bearer {running.token}"
        headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {caller_token(running)}"}
        server = Server("flooder", running.url.rstrip("/") + "/", headers,
                        running.process.pid, running.log, running.stop)  # fmt: skip
        counts = [0, 0]  # turns ended whole, turns refused or cut
        start = time.monotonic()
        until = start + minutes * 60
        drivers = [asyncio.create_task(drive(server, chunks, until, counts))
                   for _ in range(parallel)]  # fmt: skip
        peak = {"bytes": 0.0, "tasks": 0.0, "task_events": 0.0, "file": 0.0, "wal": 0.0}
        print(f"{'min':>6} {'turns':>7} {'refused':>7} {'store MiB':>9} {'file MiB':>8} "
              f"{'WAL MiB':>8} {'tasks':>6} {'events':>8}", flush=True)  # fmt: skip
        try:
            while not all(d.done() for d in drivers):
                await asyncio.wait(drivers, timeout=every)
                size = await store_size(running.url, admin)
                size["file"], size["wal"] = file_bytes(f"{db}"), file_bytes(f"{db}-wal")
                peak = {k: max(v, size[k]) for k, v in peak.items()}
                print(f"{(time.monotonic() - start) / 60:6.1f} {counts[0]:7d} {counts[1]:7d} "
                      f"{size['bytes'] / MIB:9.1f} {size['file'] / MIB:8.1f} "
                      f"{size['wal'] / MIB:8.1f} {size['tasks']:6.0f} "
                      f"{size['task_events']:8.0f}", flush=True)  # fmt: skip
        finally:
            for d in drivers:
                d.cancel()
            await asyncio.gather(*drivers, return_exceptions=True)
            running.stop()
        print(f"\n{counts[0]} turns of {chunks} chunks by one caller in "
              f"{(time.monotonic() - start) / 60:.1f} min ({parallel} at once), "
              f"{counts[1]} refused or cut")  # fmt: skip
        print(f"largest: store {peak['bytes'] / MIB:.1f} MiB (file {peak['file'] / MIB:.1f}, "
              f"WAL {peak['wal'] / MIB:.1f}), {peak['tasks']:.0f} tasks, "
              f"{peak['task_events']:.0f} events")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--every", type=float, default=30.0)
    parser.add_argument("--config-extra", default="", help="TOML lines for the server")
    options = parser.parse_args()
    asyncio.run(main(options.minutes, options.parallel, options.chunks, options.every,
                     options.config_extra))  # fmt: skip
