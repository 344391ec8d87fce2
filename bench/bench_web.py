"""Load benchmark of the approval desk: do open pages slow the A2A path, and what does one cost.

One real `tailagent serve --agent echo` (SQLite in its state dir, loopback TCP, the
local token), the client on the same machine. First T long tasks (`slow 3600`, one text
chunk a second for an hour) are started over A2A and run through every phase, so that the phases
differ only in the pages open: they hold T of `agent.max_concurrent_turns`' places in
each. T is 10 and the P pages follow them P/T each (5 for 50 pages): 50 long tasks
would hold 50 of the 64 places and leave the burst 14, measuring the gate instead of
the pages; 5 pages on one task also exercise one journal fanned out to several pages.

Each phase measures the A2A path as bench_core and bench_load do (their code):
  - N sequential SendMessage calls over one keep-alive connection (median, p95);
  - C SendStreamingMessage streams started together, each on its own connection and
    read to its end: errors, wall time, first and last event (p50, p95), and the
    server's VmRSS at the burst's start and 5 s after it.
Phases, in this order:
  - A: no page open;
  - B: P task pages open: each an SSE stream of /desk/tasks/<id>/events with the
    signed-in cookie (`tailagent web`'s sign-in link), on its own connection, read
    continuously; the events and bytes the pages received during the phase are counted;
  - C: the same, plus L list pages (/desk/events), unless --list-pages 0;
  - D: every page closed again: what is left of B's and C's figures once the pages are
    gone is the cost of a server that has run more tasks by then, not of the pages.
The memory of one open page is the server's VmRSS 3 s after the P pages opened minus
VmRSS just before, over P (likewise for the list pages); one page of each kind is
opened and closed before A, so that what the first page costs once is not counted.
The RSS 5 s after every page closed is read before D. At the end the long tasks are
cancelled and the server stopped. With --runs R, each run is a fresh server; a last
table gives each figure's median over the runs.

Then Web Push (skipped with --pushes 0; alone with --push-only), on a fresh server whose
push service is the tests' stand-in on loopback (tests/push_service.py: it checks the
VAPID JWT and decrypts each message, as a browser's push service and browser would):
  - latency: K times in turn, a task `ask` starts waiting with one device subscribed; the
    time from the task's input-required timestamp (the server's clock) to the message
    arriving decrypted at the stand-in (the same clock): p50, p95;
  - the cost of S subscriptions (one person's ten devices each, S/10 people who are all
    admins, so every prompt goes to all S): the server's VmRSS before and after they
    were made, the state file's size, and for one prompt told to all S, the time until
    the last arrived and the server's CPU time (utime + stime) it took, against one
    subscription; /healthz answered meanwhile (its slowest answer).

Usage: python bench/bench_web.py [--requests 300] [--pages 50] [--burst 100] [--runs 1]
       [--list-pages 5] [--pushes 50] [--subscribers 100] [--push-only]
Prints a table; exits non-zero if a stream failed, a page did not open or lost its
connection, a page received nothing during a phase, or a push did not arrive.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_core import pct, rpc, sequential
from bench.bench_load import IDLE_AFTER, NOTEWORTHY, Burst, Server, burst, start_tailagent
from tailagent.web.sessions import COOKIE_PREFIX
from tailagent.webpush.subscriptions import MAX_PER_PERSON as PER_PERSON
from tests.conftest import start_server
from tests.processes import status_kib
from tests.push_service import PushService

LONG_TASKS = 10
LONG_SECONDS = 3600  # outlasts any run
SETTLE = 3.0  # after pages open, before reading the RSS
OPEN_TIMEOUT = 30.0


@dataclass
class Page:
    """One open page: an SSE stream the server keeps writing to."""

    path: str
    opened: asyncio.Event = field(default_factory=asyncio.Event)
    events: int = 0
    bytes: int = 0
    error: str | None = None


@dataclass
class Phase:
    name: str
    tasks_before: int  # tasks the server had run when the phase began
    send: list[float]
    burst: Burst
    task_events: list[int] = field(default_factory=list)  # per task page, during the phase
    list_events: list[int] = field(default_factory=list)  # per list page, during the phase
    page_bytes: int = 0  # all pages, during the phase


@dataclass
class Run:
    task_pages: int
    list_pages: int
    phases: list[Phase] = field(default_factory=list)
    rss_no_pages: int = 0  # KiB, settled, just before the task pages opened
    rss_task_pages: int = 0  # KiB, SETTLE s after they opened
    rss_list_delta: int | None = None  # KiB, the list pages' opening (SETTLE s after)
    rss_closed: int | None = None  # KiB, IDLE_AFTER s after every page closed
    pages: list[Page] = field(default_factory=list)  # the task pages, then the list pages
    tasks: int = 0  # tasks sent so far
    log_excerpt: list[str] = field(default_factory=list)


# --- the desk's client side ------------------------------------------------------------


def base_url(server: Server) -> str:
    return str(httpx.URL(server.url).copy_with(path="/", query=None))


async def sign_in(server: Server) -> tuple[str, str]:
    """The desk's session cookie (its name is the server's own), as `tailagent web` and
    a browser on the box get it."""
    token = {"Authorization": server.headers["Authorization"]}
    async with httpx.AsyncClient(base_url=base_url(server), timeout=10) as http:
        link = await http.post("/desk/signin-link", json={}, headers=token)
        link.raise_for_status()
        landed = await http.get(link.json()["path"])
        cookie = next((c for c in landed.cookies.items() if c[0].startswith(COOKIE_PREFIX)), None)
    if landed.status_code != 303 or not cookie:
        raise RuntimeError(f"sign-in failed: HTTP {landed.status_code} {landed.text[:200]}")
    return cookie


async def follow(http: httpx.AsyncClient, page: Page) -> None:
    """Reads the page's event stream until cancelled, counting what arrives."""
    try:
        async with http.stream("GET", page.path) as response:
            if response.status_code != 200:
                body = (await response.aread()).decode(errors="replace")[:120]
                page.error = f"HTTP {response.status_code}: {body}"
                page.opened.set()
                return
            async for line in response.aiter_lines():
                page.bytes += len(line.encode()) + 1
                if line.startswith("event:"):
                    page.events += 1
                    page.opened.set()
        page.error = "the server closed the stream"
    except httpx.HTTPError as exc:
        page.error = f"{type(exc).__name__}: {exc}"
    finally:
        page.opened.set()


def page_client(server: Server, cookie: tuple[str, str]) -> httpx.AsyncClient:
    """A browser's worth of pages: each on its own connection, waiting as long as it is open."""
    return httpx.AsyncClient(
        base_url=base_url(server),
        cookies=dict([cookie]),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=0),
        timeout=httpx.Timeout(30, read=None),
    )


async def warm_up(server: Server, cookie: tuple[str, str]) -> int:
    """Opens and closes one task page (on a finished task: it changes no more) and one
    list page, so that what a first page costs once (templates compiled, code paths
    first run) is not counted per page. Returns the tasks it ran."""
    done = await start_tasks(server, 1, "hello")
    await asyncio.sleep(0.5)
    readers: list[asyncio.Task[None]] = []
    async with page_client(server, cookie) as http:
        pages = await open_pages(http, [f"/desk/tasks/{done[0]}/events", "/desk/events"], readers)
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
    failed = [page.error for page in pages if page.error and page.events == 0]
    if failed:
        raise RuntimeError(f"a page did not open: {failed[0]}")
    return len(done)


async def open_pages(
    http: httpx.AsyncClient, paths: list[str], readers: list[asyncio.Task[None]]
) -> list[Page]:
    """Opens the pages and returns once each has its first event (or failed)."""
    pages = [Page(path) for path in paths]
    readers += [asyncio.ensure_future(follow(http, page)) for page in pages]
    waits = [asyncio.ensure_future(page.opened.wait()) for page in pages]
    _, pending = await asyncio.wait(waits, timeout=OPEN_TIMEOUT)
    for waiting in pending:
        waiting.cancel()
    for page in pages:
        if not page.opened.is_set():
            page.error = f"no event within {OPEN_TIMEOUT:.0f} s"
    return pages


# --- the A2A side ----------------------------------------------------------------------


async def call(http: httpx.AsyncClient, server: Server, request: dict[str, object]) -> dict:
    response = await http.post(server.url, json=request)
    body = response.json()
    if "error" in body:
        raise RuntimeError(f"{request['method']} failed: {body['error']}")
    return body["result"]


async def start_tasks(server: Server, count: int, text: str) -> list[str]:
    ids = []
    async with httpx.AsyncClient(headers=server.headers, timeout=30) as http:
        for _ in range(count):
            request = rpc("SendMessage", text)
            request["params"]["configuration"] = {"returnImmediately": True}  # type: ignore[index]
            ids.append((await call(http, server, request))["task"]["id"])
    return ids


async def cancel_tasks(server: Server, ids: list[str]) -> None:
    """Cancels the tasks still running (an ended one answers "cannot be canceled")."""
    async with httpx.AsyncClient(headers=server.headers, timeout=30) as http:
        for task_id in ids:
            request = {"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": task_id}}
            body = (await http.post(server.url, json=request)).json()
            if "error" in body and "cannot be canceled" not in str(body["error"]):
                raise RuntimeError(f"CancelTask failed: {body['error']}")


async def phase(
    server: Server, name: str, args: argparse.Namespace, run: Run, pages: list[Page]
) -> Phase:
    """The A2A figures while `pages` are open (the task pages first), and what they got."""
    print(f"  {name} ...", file=sys.stderr, flush=True)
    events, sent = [p.events for p in pages], sum(p.bytes for p in pages)
    measured = Phase(name, run.tasks, [], Burst(args.burst))
    measured.send = await sequential(server.url, args.requests, server.headers)
    measured.burst = await burst(server, args.burst)
    run.tasks += 20 + args.requests + args.burst  # sequential() warms up with 20
    during = [p.events - seen for p, seen in zip(pages, events, strict=True)]
    measured.task_events = during[: run.task_pages]
    measured.list_events = during[run.task_pages :]
    measured.page_bytes = sum(p.bytes for p in pages) - sent
    return measured


def rss_kib(server: Server) -> int:
    return status_kib(server.pid) or 0


async def one_run(args: argparse.Namespace) -> Run:
    run = Run(args.pages, args.list_pages)
    with tempfile.TemporaryDirectory() as tmp:
        server = start_tailagent(Path(tmp))
        readers: list[asyncio.Task[None]] = []
        long_ids: list[str] = []
        try:
            count = min(LONG_TASKS, args.pages)
            long_ids = await start_tasks(server, count, f"slow {LONG_SECONDS}")
            cookie = await sign_in(server)
            run.tasks = len(long_ids) + await warm_up(server, cookie)
            await asyncio.sleep(1.0)
            run.phases.append(await phase(server, "A: none", args, run, []))

            async with page_client(server, cookie) as http:
                run.rss_no_pages = rss_kib(server)
                paths = [f"/desk/tasks/{long_ids[i % count]}/events" for i in range(args.pages)]
                run.pages = await open_pages(http, paths, readers)
                await asyncio.sleep(SETTLE)
                run.rss_task_pages = rss_kib(server)
                name = f"B: {args.pages} pages"
                run.phases.append(await phase(server, name, args, run, run.pages))
                if args.list_pages:
                    before = rss_kib(server)
                    run.pages += await open_pages(http, ["/desk/events"] * args.list_pages, readers)
                    await asyncio.sleep(SETTLE)
                    run.rss_list_delta = rss_kib(server) - before
                    name = f"C: +{args.list_pages} lists"
                    run.phases.append(await phase(server, name, args, run, run.pages))
                for reader in readers:
                    reader.cancel()
                await asyncio.gather(*readers, return_exceptions=True)
            await asyncio.sleep(IDLE_AFTER)
            run.rss_closed = rss_kib(server)
            # The same again with every page closed: tells the pages' cost from that of a
            # server that has run more tasks by now.
            run.phases.append(await phase(server, "D: closed", args, run, []))
        finally:
            for reader in readers:
                reader.cancel()
            try:
                await cancel_tasks(server, long_ids)
            finally:
                server.stop()
                log = server.log().splitlines()
                run.log_excerpt = [
                    line for line in log if any(word in line.lower() for word in NOTEWORTHY)
                ][:12]
    return run


# --- report ----------------------------------------------------------------------------


@dataclass
class Row:
    label: str
    values: list[float | None]  # one per phase; None: not measured there
    ratio: bool = False  # a time: its ratio to phase A is shown


def rows(run: Run) -> list[Row]:
    def each(value: Callable[[Phase], float | None], ratio: bool = False) -> list[float | None]:
        return [value(p) for p in run.phases]

    def ms(values: list[float], q: float) -> float | None:
        return pct(values, q) * 1000 if values else None

    def fewest(values: list[int]) -> float | None:
        return min(values) if values else None

    last = len(run.phases) - 1
    at_last = [None] * last
    per_list = None
    if run.rss_list_delta is not None:
        per_list = run.rss_list_delta / run.list_pages
    c = run.phases[0].burst.streams
    return [
        Row("tasks run before the phase", each(lambda p: p.tasks_before)),
        Row("SendMessage median, ms", each(lambda p: statistics.median(p.send) * 1000), True),
        Row("SendMessage p95, ms", each(lambda p: ms(p.send, 0.95)), True),
        Row(f"{c} streams: errors", each(lambda p: p.burst.errors + p.burst.timeouts)),
        Row("  unfinished", each(lambda p: p.burst.unfinished)),
        Row("  wall, s", each(lambda p: p.burst.wall), True),
        Row("  first event p50, ms", each(lambda p: ms(p.burst.first, 0.5)), True),
        Row("  first event p95, ms", each(lambda p: ms(p.burst.first, 0.95)), True),
        Row("  last event p50, ms", each(lambda p: ms(p.burst.last, 0.5)), True),
        Row("  last event p95, ms", each(lambda p: ms(p.burst.last, 0.95)), True),
        Row("  RSS at its start, MiB", each(lambda p: p.burst.rss_before)),
        Row(f"  RSS {IDLE_AFTER:.0f} s after it, MiB", each(lambda p: p.burst.rss_idle)),
        Row("task page events, fewest", each(lambda p: fewest(p.task_events))),
        Row("list page events, fewest", each(lambda p: fewest(p.list_events))),
        Row("events to all pages", each(lambda p: sum(p.task_events + p.list_events))),
        Row("bytes to all pages, KiB", each(lambda p: p.page_bytes / 1024)),
        Row(
            "memory per task page, KiB",
            [None, (run.rss_task_pages - run.rss_no_pages) / run.task_pages],
        ),
        Row("memory per list page, KiB", [None, None, per_list][: len(run.phases)]),
        Row(
            f"RSS {IDLE_AFTER:.0f} s after all closed, MiB",
            [*at_last, None if run.rss_closed is None else run.rss_closed / 1024],
        ),
    ]


def number(value: float) -> str:
    if isinstance(value, int):  # a count
        return str(value)
    return f"{value:.2f}" if abs(value) < 100 else f"{value:.1f}"


def middle(values: list[float | None]) -> str:
    """The median over the runs, or the one run's figure."""
    found = [v for v in values if v is not None]
    if not found:
        return "-"
    median = statistics.median(found)
    counts = all(isinstance(v, int) for v in found) and float(median).is_integer()
    return number(int(median) if counts else median)


def table(runs: list[Run]) -> list[str]:
    """Each phase's figures (their median over the runs) and, for times, the ratio to A
    (the median of each run's ratio)."""
    names = [p.name for p in runs[0].phases]
    header = [names[0]]
    for name in names[1:]:
        header += [name, f"{name[0]}/A"]
    per_run = [rows(run) for run in runs]
    lines: list[list[str]] = []
    for i, row in enumerate(per_run[0]):
        cells = []
        for j in range(len(names)):
            mine = [r[i].values[j] if j < len(r[i].values) else None for r in per_run]
            cells.append(middle(mine))
            if j == 0:
                continue
            ratios: list[float | None] = []
            for r in per_run if row.ratio else []:
                a, b = r[i].values[0], r[i].values[j]
                ratios.append(b / a if a and b is not None else None)
            cells.append(middle(ratios) if row.ratio else "")
        lines.append([row.label, *cells])
    width = max(len(line[0]) for line in lines)
    cols = [max(len(header[k]), *(len(line[k + 1]) for line in lines)) for k in range(len(header))]
    out = [" " * width + "  " + "  ".join(h.rjust(w) for h, w in zip(header, cols, strict=True))]
    for line in lines:
        joined = "  ".join(c.rjust(w) for c, w in zip(line[1:], cols, strict=True))
        out.append((line[0].ljust(width) + "  " + joined).rstrip())
    return out


def problems(run: Run) -> list[str]:
    found = []
    if not run.phases:
        return ["no phase finished"]
    for p in run.phases:
        b = p.burst
        if b.errors or b.timeouts or b.unfinished:
            texts = "; ".join(b.error_texts + b.unfinished_texts)
            found.append(f"{p.name}: {b.errors} errors, {b.timeouts} timeouts, "
                         f"{b.unfinished} unfinished: {texts}")  # fmt: skip
        # A list page may rightly stay quiet: the list changes only with a task's state.
        if p.task_events and min(p.task_events) == 0:
            found.append(f"{p.name}: a task page received no event during the phase")
    errors = [page.error for page in run.pages if page.error]
    for text in dict.fromkeys(errors):
        found.append(f"{errors.count(text)} pages: {text}")
    if found:
        found += [f"server log: {line}" for line in run.log_excerpt]
    return found


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--pages", type=int, default=50, help="task pages open in phase B")
    parser.add_argument("--burst", type=int, default=100, help="streams of each burst")
    parser.add_argument("--runs", type=int, default=1, help="each on a fresh server")
    parser.add_argument("--list-pages", type=int, default=5, help="added in phase C (0: no C)")
    parser.add_argument("--pushes", type=int, default=50, help="Web Push latency samples")
    parser.add_argument("--subscribers", type=int, default=100, help="for the push fan-out")
    parser.add_argument("--push-only", action="store_true", help="only the Web Push figures")
    args = parser.parse_args()
    if args.push_only:
        return await push_report(args)
    if args.pages < 1:
        parser.error("--pages must be at least 1")
    command = shlex.join([Path(sys.executable).name, *sys.argv])
    runs = []
    for i in range(args.runs):
        print(f"run {i + 1} of {args.runs}", file=sys.stderr, flush=True)
        runs.append(await one_run(args))
    tasks = min(LONG_TASKS, args.pages)
    print(f"$ {command}")
    print(
        f"{socket.gethostname()}: {len(os.sched_getaffinity(0))} cores; client and server on "
        "the same machine; tailagent echo agent, SQLite, loopback, local token"
    )
    print(
        f"{tasks} tasks `slow {LONG_SECONDS}` run through every phase; the task pages follow "
        f"them, {args.pages / tasks:g} a task.\nMemory per page: VmRSS {SETTLE:.0f} s after "
        "the pages opened, minus just before, over their count\n(one page of each kind was "
        "opened and closed before phase A). Ratios: to phase A of the same run."
    )
    for i, run in enumerate(runs, 1):
        if len(runs) > 1:
            print(f"run {i}:")
        print("\n".join(table([run])))
    if len(runs) > 1:
        print(f"median of the {len(runs)} runs:")
        print("\n".join(table(runs)))
    found = [f"run {i}: {text}" for i, run in enumerate(runs, 1) for text in problems(run)]
    if found:
        print("\n".join(found))
    if args.pushes and await push_report(args):
        return 1
    return 1 if found else 0


# --- Web Push ------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """The process's utime + stime so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def waited_at(server: Server, task_id: str) -> float:
    """When the task started waiting, by the server's clock (its status timestamp)."""
    reply = httpx.post(server.url, json=rpc_get(task_id), headers=server.headers, timeout=10)
    stamp = reply.json()["result"]["status"]["timestamp"]
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def rpc_get(task_id: str) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}


def ask(server: Server, text: str) -> str:
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
        "message": {"messageId": os.urandom(8).hex(), "role": "ROLE_USER",
                    "parts": [{"text": text}]},
        "configuration": {"returnImmediately": True}}}  # fmt: skip
    reply = httpx.post(server.url, json=body, headers=server.headers, timeout=10)
    return str(reply.json()["result"]["task"]["id"])


def cancel(server: Server, task_id: str) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": task_id}}
    httpx.post(server.url, json=body, headers=server.headers, timeout=10)


def subscribe(server: Server, push: PushService, count: int, bearer: str) -> None:
    """`count` subscriptions of the bearer's person, as the page makes them (a program
    with a bearer token may POST without the page's Origin)."""
    headers = {"Authorization": f"Bearer {bearer}"}
    with httpx.Client(base_url=base_url(server), headers=headers, timeout=10) as http:
        token = http.get("/desk/push/key").json()["token"]
        for _ in range(count):
            made = http.post(
                "/desk/push/subscriptions",
                json={"subscription": push.subscribe().to_json(), "token": token},
            )
            made.raise_for_status()  # fmt: skip


def admin_token(state_dir: Path, name: str) -> str:
    """A new admin's bearer token (`tailagent token add`, as a person would make it)."""
    made = subprocess.run(
        [sys.executable, "-m", "tailagent", "token", "add", name, "--role", "admin",
         "--state-dir", str(state_dir)], capture_output=True, text=True, check=True,
    )  # fmt: skip
    return made.stdout.strip().splitlines()[0]


@dataclass
class PushFigures:
    latency: list[float] = field(default_factory=list)  # seconds, waiting -> arrived
    rss_before: int = 0
    rss_after: int = 0
    file_bytes: int = 0
    one_cpu: float = 0.0
    all_cpu: float = 0.0
    all_seconds: float = 0.0
    healthz_worst: float = 0.0


async def healthz_worst(server: Server, stop: asyncio.Event) -> float:
    worst = 0.0
    async with httpx.AsyncClient(base_url=base_url(server), timeout=10) as http:
        while not stop.is_set():
            start = time.perf_counter()
            await http.get("/healthz")
            worst = max(worst, time.perf_counter() - start)
            await asyncio.sleep(0.005)
    return worst


async def fan_out(server: Server, push: PushService, expected: int) -> tuple[float, float, float]:
    """One prompt told to every subscription: (seconds until the last arrived, the
    server's CPU seconds meanwhile, /healthz's slowest answer meanwhile)."""
    push.received.clear()
    stop = asyncio.Event()
    probe = asyncio.create_task(healthz_worst(server, stop))
    cpu = cpu_seconds(server.pid)
    task_id = await asyncio.to_thread(ask, server, "ask")
    await asyncio.to_thread(push.wait_for, expected, 30.0)
    arrived = max(r.at for r in push.received)
    spent = cpu_seconds(server.pid) - cpu
    stop.set()
    worst = await probe
    started = await asyncio.to_thread(waited_at, server, task_id)
    last_wall = time.time() - (time.monotonic() - arrived)
    await asyncio.to_thread(cancel, server, task_id)
    return last_wall - started, spent, worst


async def push_run(args: argparse.Namespace) -> PushFigures:
    figures = PushFigures()
    push = PushService()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "tailagent.toml"
        config.write_text(f'[desk]\npush_services = ["{push.origin}"]\n')
        running = start_server(Path(tmp) / "tailagent", "--config", str(config))
        server = Server("tailagent", running.url.rstrip("/") + "/",
                        {"A2A-Version": "1.0", "Authorization": f"Bearer {running.token}"},
                        running.process.pid, running.log, running.stop)  # fmt: skip
        try:
            local = running.token
            subscribe(server, push, 1, local)
            for _ in range(args.pushes):
                push.received.clear()
                task_id = await asyncio.to_thread(ask, server, "ask")
                await asyncio.to_thread(push.wait_for, 1)
                arrived_wall = time.time() - (time.monotonic() - push.received[0].at)
                figures.latency.append(arrived_wall - waited_at(server, task_id))
                await asyncio.to_thread(cancel, server, task_id)
            _, figures.one_cpu, _ = await fan_out(server, push, 1)
            await asyncio.sleep(1.0)
            figures.rss_before = rss_kib(server)
            left = args.subscribers - 1
            subscribe(server, push, min(left, PER_PERSON - 1), local)
            left -= min(left, PER_PERSON - 1)
            for person in range(1, 1 + -(-left // PER_PERSON)):
                bearer = admin_token(running.state_dir, f"bench-{person}")
                subscribe(server, push, min(left, PER_PERSON), bearer)
                left -= min(left, PER_PERSON)
            await asyncio.sleep(1.0)
            figures.rss_after = rss_kib(server)
            figures.file_bytes = (running.state_dir / "webpush-subscriptions.json").stat().st_size
            figures.all_seconds, figures.all_cpu, figures.healthz_worst = await fan_out(
                server, push, args.subscribers
            )
        finally:
            server.stop()
            push.stop()
    return figures


async def push_report(args: argparse.Namespace) -> int:
    try:
        figures = await push_run(args)
    except AssertionError as exc:
        print(f"Web Push: {exc}")
        return 1
    ms = [x * 1000 for x in figures.latency]
    print(f"Web Push to the stand-in push service, {len(ms)} prompts one after another:")
    print(f"  input-required -> message decrypted at the push service: p50 {pct(ms, 0.5):.1f} ms,"
          f" p95 {pct(ms, 0.95):.1f} ms, max {max(ms):.1f} ms")  # fmt: skip
    print(f"{args.subscribers} subscriptions (every prompt told to all):")
    print(f"  server VmRSS {figures.rss_before / 1024:.1f} -> {figures.rss_after / 1024:.1f} MiB"
          f" ({(figures.rss_after - figures.rss_before) / args.subscribers:.1f} KiB each);"
          f" state file {figures.file_bytes / 1024:.1f} KiB")  # fmt: skip
    print(f"  one prompt: last of {args.subscribers} arrived {figures.all_seconds * 1000:.0f} ms"
          f" after input-required; server CPU {figures.all_cpu * 1000:.0f} ms"
          f" (one subscription: {figures.one_cpu * 1000:.0f} ms); /healthz slowest"
          f" {figures.healthz_worst * 1000:.1f} ms meanwhile")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
