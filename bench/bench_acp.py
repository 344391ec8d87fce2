"""Benchmark of ACP agents, with tests/fake_acp_agent.py standing in for a real one.

Measures, against real servers in subprocesses:
  - a first turn on a new context with a warm spare process and without one;
  - a follow-up turn on an existing context, against the echo agent doing the same;
  - the memory of the server and its agent processes with 20 live contexts.

With --isolation it measures instead a first turn on a new context, with a warm spare
and without one, on a workspace that is a git repository of --files small files,
served with --isolation shared and then with --isolation worktree (each new context
takes the worktree made ahead for it, and the spare's session opens there).

Usage: python bench/bench_acp.py [--samples 8]
       python bench/bench_acp.py --isolation [--samples 8] [--files 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_core import (
    ISOLATION_HEADER,
    check_isolation,
    isolated,
    isolation_row,
    load,
    scratch,
)
from tests.conftest import RunningServer, start_server
from tests.processes import children, status_kib

FAKE = Path(__file__).resolve().parent.parent / "tests" / "fake_acp_agent.py"


def send(
    text: str, context_id: str = "", data: dict[str, object] | None = None
) -> dict[str, object]:
    """A SendMessage request: `text`, or a data part `data` (a merge, say) in its place."""
    part = {"text": text} if data is None else {"data": data, "mediaType": "application/json"}
    message: dict[str, object] = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [part],
    }
    if context_id:
        message["contextId"] = context_id
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}


def acp_server(tmp: Path, config: str, *extra: str) -> RunningServer:
    (tmp / "c.toml").write_text(config)
    command = f"{sys.executable} {FAKE}"
    return start_server(tmp, "--agent-command", command, "--config", str(tmp / "c.toml"), *extra)


async def timed_turn(
    http: httpx.AsyncClient, url: str, text: str, context_id: str = ""
) -> tuple[float, dict[str, Any]]:
    """One SendMessage and its time; the task it returns, which must have completed."""
    start = time.perf_counter()
    response = (await http.post(url, json=send(text, context_id))).json()
    elapsed = time.perf_counter() - start
    task: dict[str, Any] = response["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task["status"]
    return elapsed, task


async def turn(
    http: httpx.AsyncClient, url: str, text: str, context_id: str = ""
) -> tuple[float, str]:
    elapsed, task = await timed_turn(http, url, text, context_id)
    return elapsed, task["contextId"]


def client(server: RunningServer) -> httpx.AsyncClient:
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {server.token}"}
    return httpx.AsyncClient(headers=headers, timeout=60)


async def first_turns(
    config: str,
    samples: int,
    settle: float,
    isolation: str | None = None,
    files: int = 0,
    under: Path | None = None,
) -> list[float]:
    """`isolation` (shared, worktree): served so, on a git repository of `files` files;
    `under`: where to leave the server's files (see bench_core.scratch)."""
    times = []
    with scratch(under) as tmp:
        server = acp_server(Path(tmp), config, *isolated(Path(tmp), isolation, files))
        check_isolation(server, isolation)
        try:
            async with client(server) as http:
                await asyncio.sleep(settle)
                for _ in range(samples):
                    elapsed, _ = await turn(http, server.url, "hello")
                    times.append(elapsed)
                    await asyncio.sleep(settle)  # a person takes a moment between chats
        finally:
            server.stop()
    return times


async def follow_ups(server: RunningServer, samples: int) -> list[float]:
    async with client(server) as http:
        _, context_id = await turn(http, server.url, "hello")
        for _ in range(5):
            await turn(http, server.url, "warm", context_id)
        return [(await turn(http, server.url, "again", context_id))[0] for _ in range(samples)]


async def memory_with_contexts(count: int) -> tuple[int, int, int]:
    with tempfile.TemporaryDirectory() as tmp:
        server = acp_server(Path(tmp), f"[agent]\nmax_processes = {count}\nwarm_spares = 1\n")
        try:
            async with client(server) as http:
                for _ in range(count):
                    await turn(http, server.url, "hello")
            agents = children(server.process.pid)
            return (status_kib(server.process.pid) or 0,
                    sum(status_kib(p) or 0 for p in agents), len(agents))  # fmt: skip
        finally:
            server.stop()


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:.1f} ms"


async def isolation(samples: int, files: int) -> None:
    print(f"first turn on a new context, {samples} each, a git workspace of {files} files (ms)")
    print(ISOLATION_HEADER)
    with tempfile.TemporaryDirectory() as under:
        for label, config, settle in (("ACP fake, warm spare", "warm_spares = 1", 1.5),
                                      ("ACP fake, no spare", "warm_spares = 0", 0.2)):  # fmt: skip
            shared, worktree = [
                await first_turns(f"[agent]\n{config}\n", samples, settle, mode, files, Path(under))
                for mode in ("shared", "worktree")
            ]
            print(isolation_row(label, shared, worktree))
    print(f"load average at the end: {load()}")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument(
        "--isolation",
        action="store_true",
        help="first turns with --isolation shared against worktree, on a git workspace",
    )
    parser.add_argument("--files", type=int, default=10_000, help="the --isolation workspace's")
    args = parser.parse_args()
    if args.isolation:
        await isolation(args.samples, args.files)
        return
    warm = await first_turns("[agent]\nwarm_spares = 1\n", args.samples, settle=1.5)
    cold = await first_turns("[agent]\nwarm_spares = 0\n", args.samples, settle=0.2)
    print(f"first turn, new context, warm spare:    {ms(warm)}")
    print(f"first turn, new context, no spare:      {ms(cold)}")
    print(f"  ratio: {statistics.median(cold) / statistics.median(warm):.1f}x")
    with tempfile.TemporaryDirectory() as tmp:
        server = acp_server(Path(tmp), "")
        try:
            acp = await follow_ups(server, args.samples * 10)
        finally:
            server.stop()
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp))
        try:
            echo = await follow_ups(server, args.samples * 10)
        finally:
            server.stop()
    print(f"follow-up turn, same context, ACP fake: {ms(acp)}")
    print(f"follow-up turn, same context, echo:     {ms(echo)}")
    overhead = (statistics.median(acp) - statistics.median(echo)) * 1000
    print(f"  ACP overhead: {overhead:.2f} ms")
    server_kib, agents_kib, agents = await memory_with_contexts(20)
    print(
        f"20 live contexts: server RSS {server_kib / 1024:.0f} MiB, "
        f"{agents} agent processes {agents_kib / 1024:.0f} MiB in all"
    )


if __name__ == "__main__":
    asyncio.run(main())
