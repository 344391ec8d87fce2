"""Benchmark of the core path: tailagent serve --agent echo on loopback.

Measures, against a real server in a subprocess:
  - N sequential SendMessage calls over one keep-alive connection (median, p95);
  - time to the first streamed event of SendStreamingMessage (median, p95);
  - C concurrent SendStreamingMessage streams, each read to its end (errors, wall time).

Usage: python bench/bench_core.py [--requests 300] [--streams 100] [--floor]
Prints the figures; exits non-zero if any stream failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import RunningServer, start_server

HEADERS = {"A2A-Version": "1.0"}
ISOLATION_LOG = {
    "worktree": "isolation: each conversation in a repository",
    "shared": "isolation: shared",
}


def rpc(method: str, text: str) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": method,
        "params": {
            "message": {
                "messageId": uuid.uuid4().hex,
                "role": "ROLE_USER",
                "parts": [{"text": text}],
            }
        },
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def sequential(url: str, n: int, headers: dict[str, str]) -> list[float]:
    times = []
    async with httpx.AsyncClient(headers=headers) as http:
        for _ in range(20):  # warm up
            await http.post(url, json=rpc("SendMessage", "warm"))
        for _ in range(n):
            start = time.perf_counter()
            response = await http.post(url, json=rpc("SendMessage", "hello"))
            times.append(time.perf_counter() - start)
            assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    return times


async def first_event(url: str, n: int, headers: dict[str, str]) -> list[float]:
    times = []
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        for _ in range(n):
            start = time.perf_counter()
            async with http.stream("POST", url, json=rpc("SendStreamingMessage", "hi")) as r:
                first = None
                async for line in r.aiter_lines():
                    if first is None and line.startswith("data:"):
                        first = time.perf_counter() - start
                assert first is not None
                times.append(first)
    return times


async def one_stream(http: httpx.AsyncClient, url: str) -> bool:
    final = None
    async with http.stream("POST", url, json=rpc("SendStreamingMessage", "think plan")) as r:
        async for line in r.aiter_lines():
            if line.startswith("data:"):
                event = json.loads(line[5:])
                update = event.get("result", {}).get("statusUpdate")
                if update:
                    final = update["status"]["state"]
    return final == "TASK_STATE_COMPLETED"


async def concurrent(url: str, c: int, headers: dict[str, str]) -> tuple[int, float]:
    limits = httpx.Limits(max_connections=c, max_keepalive_connections=c)
    async with httpx.AsyncClient(headers=headers, timeout=60, limits=limits) as http:
        start = time.perf_counter()
        results = await asyncio.gather(
            *(one_stream(http, url) for _ in range(c)), return_exceptions=True
        )
        wall = time.perf_counter() - start
    errors = sum(1 for r in results if r is not True)
    return errors, wall


def without_tailnet() -> str | None:
    """Why a real test tailnet cannot run here (tests/real_tailnet.py builds Tailscale's
    release first, or reuses the build), in the line a tailnet bench prints before it
    exits 2; None when it can."""
    from tests.real_tailnet import Unavailable, build

    try:
        build()
    except Unavailable as exc:
        return f"no real tailnet here: {exc}"
    return None


def ms(value: float) -> str:
    return f"{value * 1000:.2f} ms"


def git_repo(path: Path, files: int, per_dir: int = 50) -> int:
    """Makes `path` a throwaway git repository on branch main: `files` small text files,
    `per_dir` to a directory, in directories two levels deep (pkgNN/modN/), one commit.
    Returns how many directories hold them.

    Its objects are in one pack, as in a clone (`git fast-import`, then a checkout). Not
    `git add` and `commit`: they would leave a loose object a file, and commit's `gc
    --auto` would then pack and delete them in the background while a benchmark runs."""
    stream = bytearray()
    paths = []
    for n in range(files):
        group = n // per_dir
        paths.append(f"pkg{group // 10:02d}/mod{group % 10}/file{n % per_dir:03d}.py")
        content = f'"""File {n}."""\nVALUE = {n}\n'.encode()
        stream += b"blob\nmark :%d\ndata %d\n%s\n" % (n + 1, len(content), content)
    message = f"{files} files".encode()
    stream += b"commit refs/heads/main\ncommitter bench <bench@example.com> now\n"
    stream += b"data %d\n%s\n" % (len(message), message)
    stream += b"".join(b"M 100644 :%d %s\n" % (n + 1, p.encode()) for n, p in enumerate(paths))
    path.mkdir(parents=True, exist_ok=True)
    for args, data in (
        (("init", "-q", "-b", "main"), None),
        (("config", "user.name", "bench"), None),
        (("config", "user.email", "bench@example.com"), None),
        (("fast-import", "--quiet", "--date-format=now"), bytes(stream)),
        (("reset", "-q", "--hard"), None),
    ):
        subprocess.run(["git", "-C", str(path), *args], input=data, check=True)
    return len({p.rsplit("/", 1)[0] for p in paths})


def isolated(tmp: Path, isolation: str | None, files: int, per_dir: int = 50) -> tuple[str, ...]:
    """With an isolation mode, makes the workspace `start_server(tmp)` serves a git
    repository of `files` files and returns the options that pick the mode."""
    if isolation is None:
        return ()
    git_repo(tmp / "workspace", files, per_dir)
    return ("--isolation", isolation)


def scratch(under: Path | None) -> contextlib.AbstractContextManager[str]:
    """A temporary directory removed on leaving it; or, made `under` a longer-lived one,
    kept until that one goes. On a journal-less ext4 (such as this machine's), a file
    made within minutes of many being deleted is slow to make (ext4 steps over each
    recently deleted inode), so a comparison leaves its deletions for its end."""
    if under is None:
        return tempfile.TemporaryDirectory()
    return contextlib.nullcontext(tempfile.mkdtemp(dir=under))


def check_isolation(server: RunningServer, isolation: str | None) -> None:
    """Refuses to time a server that does not run the isolation it was asked for (a
    workspace that cannot have worktrees runs shared, and would time as one)."""
    if isolation is not None and ISOLATION_LOG[isolation] not in server.log():
        server.stop()
        raise SystemExit(f"the server did not run isolation {isolation}:\n{server.log()}")


ISOLATION_HEADER = (
    f"{'':<34}{'shared':>16}{'worktree':>18}\n"
    f"{'':<34}{'p50':>8}{'p95':>8}{'p50':>10}{'p95':>8}{'ratio':>8}"
)


def isolation_row(label: str, shared: list[float], worktree: list[float]) -> str:
    """A row under ISOLATION_HEADER: median and p95 (ms) of each mode, and the ratio of
    the medians."""
    base, tree = statistics.median(shared), statistics.median(worktree)
    return (
        f"{label:<34}{base * 1000:>8.1f}{pct(shared, 0.95) * 1000:>8.1f}"
        f"{tree * 1000:>10.1f}{pct(worktree, 0.95) * 1000:>8.1f}{tree / base:>7.1f}x"
    )


def load() -> str:
    """The machine's load averages (1, 5, 15 min): figures on a busy machine look odd."""
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument(
        "--floor",
        action="store_true",
        help="serve with a2a-sdk's in-memory task store: the SDK path without persistence",
    )
    args = parser.parse_args()
    floor = (str(Path(__file__).with_name("floor_server.py")),)
    program = floor if args.floor else ("-m", "tailagent")
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), program=program)
        try:
            headers = {**HEADERS, "Authorization": f"Bearer {server.token}"}
            seq = await sequential(server.url, args.requests, headers)
            first = await first_event(server.url, min(args.requests, 100), headers)
            errors, wall = await concurrent(server.url, args.streams, headers)
        finally:
            server.stop()
    print(
        f"SendMessage x{len(seq)} sequential: median {ms(statistics.median(seq))}, "
        f"p95 {ms(pct(seq, 0.95))}"
    )
    print(
        f"first streamed event x{len(first)}: median {ms(statistics.median(first))}, "
        f"p95 {ms(pct(first, 0.95))}"
    )
    print(f"{args.streams} concurrent streams: {errors} errors, wall {wall:.2f} s")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
