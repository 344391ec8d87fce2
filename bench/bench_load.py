"""Load benchmark: bursts of concurrent streams, tailagent side by side with a2acode 0.9.0.

Both servers run the offline echo agent on loopback, one after the other, on this machine.
For each server it measures:
  - the server process's resident memory (VmRSS) when idle after start;
  - N sequential SendMessage calls over one keep-alive connection (median), and the ratio,
    with both servers up and called in alternating blocks (see side_by_side);
  - for each concurrency C: C SendStreamingMessage streams started together, each on its own
    connection and read to its end: errors (count and the first distinct texts), per-stream
    timeouts, wall time, time to first and to last event (p50, p95), and VmRSS before the
    burst, right after it, and after 5 s idle. A burst still running after 120 s is cut off
    and reported as not finished.

a2acode is installed into its own virtualenv (/tmp/a2acode-venv) if missing; it is served
with `a2acode serve --backend echo` and a bearer token, and called with A2A 1.0 JSON-RPC.

Usage: python bench/bench_load.py [--streams 100,1000] [--requests 300]
Prints a table; exits non-zero if any tailagent stream failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import secrets
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_core import pct, rpc
from tests.conftest import start_server
from tests.processes import status_kib
from tests.tailnet import free_port

A2ACODE_VERSION = "0.9.0"
A2ACODE_VENV = Path("/tmp/a2acode-venv")
A2ACODE_BIN = A2ACODE_VENV / "bin" / "a2acode"
STREAM_TIMEOUT = 120.0  # per stream, between bytes: slow is reported as slow
BURST_DEADLINE = 120.0  # a burst still running after this is cut off
IDLE_AFTER = 5.0
START_TIMEOUT = 30.0


FAKE_ACP_AGENT = [
    sys.executable,
    str(Path(__file__).resolve().parent.parent / "tests" / "fake_acp_agent.py"),
]


def rss_mib(pid: int) -> float | None:
    """The process's VmRSS in MiB, or None if it is gone."""
    kib = status_kib(pid)
    return None if kib is None else kib / 1024


@dataclass
class Server:
    name: str
    url: str
    headers: dict[str, str]
    pid: int
    log: Callable[[], str]
    stop: Callable[[], None]


@dataclass
class Burst:
    streams: int
    ok: int = 0
    errors: int = 0
    timeouts: int = 0
    unfinished: int = 0
    error_texts: list[str] = field(default_factory=list)
    unfinished_texts: list[str] = field(default_factory=list)
    wall: float = 0.0
    first: list[float] = field(default_factory=list)
    last: list[float] = field(default_factory=list)
    rss_before: float | None = None
    rss_after: float | None = None
    rss_idle: float | None = None


@dataclass
class Result:
    name: str
    rss_start: float | None = None
    send_median: float | None = None
    send_error: str | None = None
    bursts: list[Burst] = field(default_factory=list)
    log_excerpt: list[str] = field(default_factory=list)


class StreamFailed(Exception):
    pass


# --- servers ---------------------------------------------------------------------------


def ensure_a2acode() -> None:
    if A2ACODE_BIN.exists():
        return
    print(f"installing a2acode=={A2ACODE_VERSION} into {A2ACODE_VENV} ...", flush=True)
    steps = [
        ["python3", "-m", "venv", str(A2ACODE_VENV)],
        [str(A2ACODE_VENV / "bin" / "pip"), "install", "-q", f"a2acode=={A2ACODE_VERSION}"],
    ]
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(
                f"could not install a2acode: `{shlex.join(step)}` failed:\n"
                f"{done.stdout}{done.stderr}"
            )


def start_a2acode(tmp: Path, agent: list[str] | None = None) -> Server:
    """With `agent`, fronting that ACP agent command; else its echo backend."""
    ensure_a2acode()
    token = secrets.token_urlsafe(24)
    token_file = tmp / "a2acode-token"
    token_file.write_text(token)
    workspace = tmp / "a2acode-workspace"
    workspace.mkdir()
    port = free_port()
    log_path = tmp / "a2acode.log"
    args = [
        str(A2ACODE_BIN),
        "serve",
        *(["--backend", "acp", "--agent-command", shlex.join(agent)] if agent else []),
        *([] if agent else ["--backend", "echo"]),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--cwd",
        str(workspace),
        "--auth-token-file",
        str(token_file),
    ]
    with log_path.open("w") as log_file:
        process = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT)

    def stop() -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT
    card: dict[str, object] | None = None
    while time.monotonic() < deadline and process.poll() is None:
        try:
            response = httpx.get(f"{base}/.well-known/agent-card.json", timeout=2)
            if response.status_code == 200:
                card = response.json()
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    if card is None:
        stop()
        raise RuntimeError(f"a2acode did not start:\n{log_path.read_text()}")
    # Its card lists JSON-RPC at A2A 1.0 (and 0.3); take the 1.0 JSON-RPC URL.
    interfaces = card.get("supportedInterfaces")
    url = f"{base}/"
    if isinstance(interfaces, list):
        for interface in interfaces:
            if (
                isinstance(interface, dict)
                and interface.get("protocolBinding") == "JSONRPC"
                and interface.get("protocolVersion") == "1.0"
            ):
                url = str(interface["url"])
                break
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {token}"}
    return Server("a2acode", url, headers, process.pid, log_path.read_text, stop)


def start_tailagent(tmp: Path, agent: list[str] | None = None) -> Server:
    extra = ("--agent-command", shlex.join(agent)) if agent else ()
    server = start_server(tmp / "tailagent", *extra)
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {server.token}"}
    url = server.url.rstrip("/") + "/"

    def stop() -> None:
        server.stop()

    return Server("tailagent", url, headers, server.process.pid, server.log, stop)


# --- load ------------------------------------------------------------------------------


async def sequential(server: Server, n: int, warm_up: int = 20) -> list[float]:
    """The times of n SendMessage calls one after another, after `warm_up` untimed."""
    times = []
    async with httpx.AsyncClient(headers=server.headers, timeout=30) as http:
        for i in range(warm_up + n):
            start = time.perf_counter()
            response = await http.post(server.url, json=rpc("SendMessage", "hello"))
            elapsed = time.perf_counter() - start
            state = response.json()["result"]["task"]["status"]["state"]
            if state != "TASK_STATE_COMPLETED":
                raise StreamFailed(f"SendMessage ended in {state}")
            if i >= warm_up:
                times.append(elapsed)
    return times


async def side_by_side(requests: int, blocks: int) -> tuple[list[float], list[float]]:
    """SendMessage times of a2acode and tailagent, both serving at once and called in
    turns, a block each, the first of a pair alternating: this machine's speed drifts
    by tens of percent within a minute, and servers measured one after the other
    would carry that drift into their ratio."""
    per_block = max(1, requests // blocks)
    with tempfile.TemporaryDirectory() as tmp:
        servers = [start_a2acode(Path(tmp)), start_tailagent(Path(tmp))]
        try:
            await asyncio.sleep(1.0)
            times: list[list[float]] = [[], []]
            for block in range(blocks):
                for i in (0, 1) if block % 2 == 0 else (1, 0):
                    times[i] += await sequential(servers[i], per_block, warm_up=5)
        finally:
            for server in servers:
                server.stop()
    return times[0], times[1]


@dataclass
class Progress:
    """How far a stream got: told for the streams a burst cut off."""

    headers: bool = False
    events: int = 0
    state: str | None = None

    def describe(self) -> str:
        if not self.headers:
            return "no response headers"
        return f"{self.events} events, last state {self.state}"


async def one_stream(
    http: httpx.AsyncClient, url: str, t0: float, progress: Progress
) -> tuple[float, float]:
    """One stream read to its end: (time to first event, time to last event) from t0."""
    first: float | None = None
    last: float | None = None
    final = None
    said = ""
    async with http.stream("POST", url, json=rpc("SendStreamingMessage", "think plan")) as r:
        progress.headers = True
        if r.status_code != 200:
            body = (await r.aread()).decode(errors="replace")[:120]
            raise StreamFailed(f"HTTP {r.status_code}: {body}")
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            now = time.perf_counter() - t0
            first = now if first is None else first
            last = now
            progress.events += 1
            event = json.loads(line[5:])
            if "error" in event:
                raise StreamFailed(f"JSON-RPC error: {json.dumps(event['error'])[:120]}")
            result = event.get("result", {})
            status = (result.get("statusUpdate") or result.get("task") or {}).get("status")
            if status:
                final = progress.state = status.get("state")
                parts = (status.get("message") or {}).get("parts") or [{}]
                said = str(parts[0].get("text", ""))[:100]
    if first is None or last is None:
        raise StreamFailed("stream closed with no event")
    if final != "TASK_STATE_COMPLETED":
        raise StreamFailed(f"stream ended in state {final}: {said!r}")
    return first, last


async def burst(server: Server, c: int) -> Burst:
    out = Burst(c, rss_before=rss_mib(server.pid))
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=0)
    timeout = httpx.Timeout(STREAM_TIMEOUT)
    errors: dict[str, int] = {}
    async with httpx.AsyncClient(headers=server.headers, timeout=timeout, limits=limits) as http:
        t0 = time.perf_counter()
        progress = [Progress() for _ in range(c)]
        tasks = [asyncio.ensure_future(one_stream(http, server.url, t0, p)) for p in progress]
        done, pending = await asyncio.wait(tasks, timeout=BURST_DEADLINE)
        out.wall = time.perf_counter() - t0
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    out.unfinished = len(pending)
    cut = [p.describe() for task, p in zip(tasks, progress, strict=True) if task in pending]
    out.unfinished_texts = [f"{cut.count(text)}x {text}" for text in dict.fromkeys(cut)][:4]
    for task in done:
        exc = task.exception()
        if exc is None:
            first, last = task.result()
            out.ok += 1
            out.first.append(first)
            out.last.append(last)
        elif isinstance(exc, httpx.TimeoutException):
            out.timeouts += 1
        else:
            out.errors += 1
            text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            errors[text] = errors.get(text, 0) + 1
    out.error_texts = [f"{n}x {text}" for text, n in list(errors.items())[:4]]
    out.rss_after = rss_mib(server.pid)
    await asyncio.sleep(IDLE_AFTER)
    out.rss_idle = rss_mib(server.pid)
    return out


async def chunked_turn(
    http: httpx.AsyncClient, server: Server, chunks: int, context_id: str | None
) -> tuple[float, int, str]:
    """One streamed turn of `chunks` text chunks: (time to its last event, distinct
    chunks received, its context id). Chunks are found in the text, so a server may
    send several in one event."""
    request = rpc("SendStreamingMessage", f"chunks {chunks}")
    if context_id is not None:
        request["params"]["message"]["contextId"] = context_id  # type: ignore[index]
    start = time.perf_counter()
    texts: list[str] = []
    final = None
    async with http.stream("POST", server.url, json=request) as r:
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            result = json.loads(line[5:]).get("result", {})
            for key in ("task", "statusUpdate", "artifactUpdate", "message"):
                item = result.get(key)
                if not item:
                    continue
                context_id = item.get("contextId", context_id)
                message = (item.get("status") or {}).get("message") or {}
                parts = (item.get("artifact") or {}).get("parts") or message.get("parts") or []
                texts += [str(part.get("text", "")) for part in parts]
                final = (item.get("status") or {}).get("state", final)
    elapsed = time.perf_counter() - start
    if final != "TASK_STATE_COMPLETED" or context_id is None:
        raise StreamFailed(f"chunked turn ended in {final}")
    received = set(re.findall(r"chunk (\d+) ", "".join(texts)))
    return elapsed, len(received), context_id


async def measure_chunks(
    start: Callable[..., Server], chunks: int, turns: int
) -> tuple[float, int]:
    """Median time of `turns` follow-up turns each streaming `chunks` chunks from the
    fake ACP agent (the first turn starts the agent and is not counted), and the
    fewest chunks any turn delivered."""
    with tempfile.TemporaryDirectory() as tmp:
        server = start(Path(tmp), FAKE_ACP_AGENT)
        try:
            async with httpx.AsyncClient(headers=server.headers, timeout=120) as http:
                _, _, context_id = await chunked_turn(http, server, 1, None)
                times, counts = [], []
                for _ in range(turns):
                    elapsed, count, context_id = await chunked_turn(
                        http, server, chunks, context_id
                    )
                    times.append(elapsed)
                    counts.append(count)
        finally:
            server.stop()
    return statistics.median(times), min(counts)


NOTEWORTHY = ("error", "exception", "traceback", "warning", "too many", "refused")


async def measure(name: str, start: Callable[[Path], Server], args: argparse.Namespace) -> Result:
    result = Result(name)
    with tempfile.TemporaryDirectory() as tmp:
        server = start(Path(tmp))
        try:
            await asyncio.sleep(1.0)
            result.rss_start = rss_mib(server.pid)
            for c in args.streams:
                print(f"  {name}: {c} streams ...", file=sys.stderr, flush=True)
                result.bursts.append(await burst(server, c))
        finally:
            server.stop()
            log = server.log().splitlines()
            result.log_excerpt = [
                line for line in log if any(word in line.lower() for word in NOTEWORTHY)
            ][:12]
    return result


# --- report ----------------------------------------------------------------------------


def ms(values: list[float], q: float) -> str:
    return f"{pct(values, q) * 1000:.0f} ms" if values else "-"


def mib(value: float | None) -> str:
    return f"{value:.1f} MiB" if value is not None else "-"


def table(results: list[Result], streams: list[int], requests: int) -> list[str]:
    rows: list[tuple[str, list[str]]] = [
        ("idle RSS after start", [mib(r.rss_start) for r in results]),
        (
            f"SendMessage median (x{requests} seq, side by side)",
            [
                f"{r.send_median * 1000:.2f} ms" if r.send_median else f"failed: {r.send_error}"
                for r in results
            ],
        ),
    ]
    medians = [r.send_median for r in results]
    if all(medians) and len(medians) == 2:
        a, t = medians
        assert a is not None and t is not None
        rows.append(("  ratio tailagent / a2acode", ["1.00", f"{t / a:.2f}"]))
    for i, c in enumerate(streams):
        bs = [r.bursts[i] if i < len(r.bursts) else Burst(c) for r in results]
        rows += [
            (f"{c} streams: ok / errors", [f"{b.ok} / {b.errors}" for b in bs]),
            (
                "  timeouts / unfinished",
                [f"{b.timeouts} / {b.unfinished}" for b in bs],
            ),
            (
                "  wall",
                [
                    f"did not finish in {BURST_DEADLINE:.0f} s"
                    if b.unfinished
                    else f"{b.wall:.2f} s"
                    for b in bs
                ],
            ),
            ("  first event p50 / p95", [f"{ms(b.first, 0.5)} / {ms(b.first, 0.95)}" for b in bs]),
            ("  last event p50 / p95", [f"{ms(b.last, 0.5)} / {ms(b.last, 0.95)}" for b in bs]),
            ("  RSS before", [mib(b.rss_before) for b in bs]),
            ("  RSS right after", [mib(b.rss_after) for b in bs]),
            (f"  RSS after {IDLE_AFTER:.0f} s idle", [mib(b.rss_idle) for b in bs]),
        ]
    width = max(len(label) for label, _ in rows)
    cols = [max(len(r.name), *(len(cells[j]) for _, cells in rows)) for j, r in enumerate(results)]
    header = (
        " " * width + "  " + "  ".join(r.name.rjust(w) for r, w in zip(results, cols, strict=True))
    )
    lines = [header]
    for label, cells in rows:
        lines.append(
            label.ljust(width)
            + "  "
            + "  ".join(cell.rjust(w) for cell, w in zip(cells, cols, strict=True))
        )
    for r in results:
        for b in r.bursts:
            for text in b.error_texts:
                lines.append(f"{r.name} errors at {b.streams}: {text}")
            for text in b.unfinished_texts:
                lines.append(f"{r.name} unfinished at {b.streams}: {text}")
        if any(b.errors or b.timeouts or b.unfinished for b in r.bursts):
            lines += [f"{r.name} log: {line}" for line in r.log_excerpt]
    return lines


def parse_streams(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=parse_streams, default=[100, 1000])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument(
        "--blocks", type=int, default=6, help="turns each server takes of the sequential calls"
    )
    parser.add_argument(
        "--chunks", type=int, default=2000, help="text chunks in one streamed turn (0: skip)"
    )
    parser.add_argument("--chunk-turns", type=int, default=5)
    args = parser.parse_args()
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    results = [
        await measure("a2acode", start_a2acode, args),
        await measure("tailagent", start_tailagent, args),
    ]
    print("  both: SendMessage side by side ...", file=sys.stderr, flush=True)
    try:
        sent = await side_by_side(args.requests, args.blocks)
        for result, times in zip(results, sent, strict=True):
            result.send_median = statistics.median(times)
    except (httpx.HTTPError, StreamFailed, KeyError, ValueError) as exc:
        results[1].send_error = f"{type(exc).__name__}: {exc}"
    chunked = []
    if args.chunks:
        for name, start in (("a2acode", start_a2acode), ("tailagent", start_tailagent)):
            print(f"  {name}: {args.chunks} chunks ...", file=sys.stderr, flush=True)
            chunked.append(await measure_chunks(start, args.chunks, args.chunk_turns))
    print(f"$ {command}")
    print(
        f"{socket.gethostname()}: {len(os.sched_getaffinity(0))} cores; "
        f"client and server on the same machine; a2acode {A2ACODE_VERSION} in-memory store, "
        "tailagent SQLite in its state dir; both echo agent, bearer token"
    )
    print("\n".join(table(results, args.streams, args.requests)))
    if chunked:
        (a_time, a_count), (t_time, t_count) = chunked
        print(
            f"one turn of {args.chunks} chunks from tests/fake_acp_agent.py "
            f"(median of {args.chunk_turns}): a2acode {a_time * 1000:.0f} ms "
            f"({a_count} chunks arrived), tailagent {t_time * 1000:.0f} ms "
            f"({t_count} arrived); ratio {t_time / a_time:.2f}"
        )
    tail = results[1]
    failed = any(b.errors or b.timeouts or b.unfinished for b in tail.bursts)
    return 1 if failed or tail.send_error else 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
