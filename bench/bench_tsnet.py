"""Benchmark of the embedded tailnet node (`serve --tsnet`) against tailscaled + `tailscale serve`.

One real tailnet on this machine (tests/real_tailnet.py: our control server, real tailscaled
nodes "agentbox" and "callerbox"), and two tailagent servers with the echo agent:
  - tsnet: `tailagent serve --tsnet` joined as its own node "tsnetagent";
  - tailscaled: a plain server behind agentbox's `tailscale serve --http=80`, on a unix
    socket as `tailagent service install` sets it up. (On a loopback TCP listener each
    new connection from serve costs a whois miss, which tailscaled answers one at a
    time in ~180 ms: a burst of 100 new connections then outlasts the 3 s LocalAPI
    timeout and is refused with 503, fail-closed.)
Every request comes from the same caller node, through its HTTP proxy, by MagicDNS name.

Measures, side by side:
  1. N sequential SendMessage calls, one keep-alive connection per way, the two ways
     alternating call by call (median, p95, ratio of medians);
  2. C concurrent SendStreamingMessage streams, each read to its end (errors, wall time,
     time to each stream's first event);
  3. the server process's memory (VmRSS idle after start, and VmRSS/VmHWM after the load);
     agentbox's tailscaled, which the embedded node replaces, for context;
  4. restarts on the same state dir (the tsnet one without TS_AUTHKEY: a stored node key):
     from Popen to `serving on` in the log, to READY=1 on a NOTIFY_SOCKET of ours, to the
     first 200 from /healthz on loopback, and to the first 200 from the caller through the
     tailnet (medians).

Usage: python bench/bench_tsnet.py [--requests 200] [--streams 100] [--restarts 5]
Prints the figures; exits non-zero if any request or stream failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_core import HEADERS, pct, rpc, without_tailnet
from tests.conftest import SERVING, RunningServer
from tests.processes import status_kib
from tests.real_tailnet import Node, Tailnet

CALLER_LOGIN = "user-2@fake-control.example.net"  # testcontrol names users in join order
TSNET_HOST = "tsnetagent"
START_TIMEOUT = 60.0
REACH_TIMEOUT = 60.0
POLL = 0.005
WAYS = ("tsnet", "tailscaled")


@dataclass
class Launched:
    """A server started here, with how long each step of its start took (seconds)."""

    server: RunningServer
    notify: socket.socket
    steps: dict[str, float] = field(default_factory=dict)

    def stop(self) -> int:
        try:
            return self.server.stop()
        finally:
            self.notify.close()


def launch(
    tmp: Path,
    extra: tuple[str, ...],
    *,
    state_dir: Path,
    listen: str = "127.0.0.1:0",
    env: dict[str, str] | None = None,
) -> Launched:
    """Like tests.conftest.start_server, timed: Popen to `serving on`, READY=1, /healthz 200."""
    workspace = tmp / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    stamp = time.monotonic_ns()
    log_path = tmp / f"server-{stamp}.log"
    notify_path = tmp / f"notify-{stamp}.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    notify.setblocking(False)
    args = [sys.executable, "-m", "tailagent", "serve", "--listen", listen, "--agent", "echo",
            "--state-dir", str(state_dir), "--cwd", str(workspace), *extra]  # fmt: skip
    base = os.environ if env is None else env
    env = {k: v for k, v in base.items() if not k.startswith("TAILAGENT_")}
    env["NOTIFY_SOCKET"] = str(notify_path)
    with log_path.open("w") as log_file:
        start = time.perf_counter()
        process = subprocess.Popen(
            args, stdout=log_file, stderr=subprocess.STDOUT, text=True, env=env
        )
    steps: dict[str, float] = {}
    url = ""
    deadline = time.monotonic() + START_TIMEOUT
    while "ready" not in steps or "healthz" not in steps:
        now = time.perf_counter()
        if not url and (match := SERVING.search(log_path.read_text())):
            url, steps["serving"] = match.group(1), now - start
        try:
            while True:
                if b"READY=1" in notify.recv(4096):
                    steps.setdefault("ready", time.perf_counter() - start)
        except BlockingIOError:
            pass
        if url and "healthz" not in steps:
            try:
                if healthz(url) == 200:
                    steps["healthz"] = time.perf_counter() - start
            except httpx.HTTPError:
                pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            process.wait()
            notify.close()
            raise RuntimeError(f"tailagent serve did not start:\n{log_path.read_text()}")
        time.sleep(POLL)
    return Launched(RunningServer(url, process, state_dir, log_path), notify, steps)


def healthz(url: str) -> int:
    """/healthz's status on a listener: http://HOST:PORT or unix:/path."""
    transport, base = None, url
    if url.startswith("unix:"):
        transport, base = httpx.HTTPTransport(uds=url.removeprefix("unix:")), "http://localhost"
    with httpx.Client(transport=transport, timeout=2) as http:
        return http.get(base + "/healthz").status_code


def reach(caller: Node, url: str, start: float, timeout: float = REACH_TIMEOUT) -> float:
    """Seconds from `start` until the caller gets a 200 from `url` through the tailnet."""
    deadline = time.monotonic() + timeout
    with httpx.Client(proxy=caller.proxy, timeout=2) as http:
        while True:
            try:
                if http.get(url).status_code == 200:
                    return time.perf_counter() - start
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} not reachable from {caller.name} in {timeout:.0f} s")
            time.sleep(0.02)


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in KiB."""
    return {field: status_kib(pid, field) or 0 for field in ("VmRSS", "VmHWM")}


def completed(response: httpx.Response) -> bool:
    if response.status_code != 200:
        return False
    result = response.json().get("result", {})
    return bool(result.get("task", {}).get("status", {}).get("state") == "TASK_STATE_COMPLETED")


async def sequential(
    proxy: str, urls: dict[str, str], n: int
) -> tuple[dict[str, list[float]], int]:
    """n SendMessage calls per way, alternating way by way, each on its own kept-alive client."""
    times: dict[str, list[float]] = {way: [] for way in urls}
    failures = 0
    clients = {way: httpx.AsyncClient(proxy=proxy, headers=HEADERS, timeout=30) for way in urls}
    try:
        for _ in range(20):  # warm up
            for way, url in urls.items():
                await clients[way].post(url, json=rpc("SendMessage", "warm"))
        for i in range(n):
            order = list(urls) if i % 2 == 0 else list(reversed(urls))
            for way in order:
                start = time.perf_counter()
                response = await clients[way].post(urls[way], json=rpc("SendMessage", "hello"))
                elapsed = time.perf_counter() - start
                if completed(response):
                    times[way].append(elapsed)
                else:
                    failures += 1
                    print(f"  via {way}: SendMessage: {response.status_code} {response.text}")
    finally:
        for client in clients.values():
            await client.aclose()
    return times, failures


async def one_stream(http: httpx.AsyncClient, url: str, start: float) -> float:
    """Reads one stream to its end; the time to its first event, or raises."""
    final, first = None, None
    body = rpc("SendStreamingMessage", "think plan")
    async with http.stream("POST", url, json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                if first is None:
                    first = time.perf_counter() - start
                update = json.loads(line[5:]).get("result", {}).get("statusUpdate")
                if update:
                    final = update["status"]["state"]
    if final != "TASK_STATE_COMPLETED" or first is None:
        raise RuntimeError(f"the stream ended in {final}")
    return first


async def concurrent(proxy: str, url: str, c: int) -> tuple[list[str], float, list[float]]:
    """c streams at once: their errors, the wall time, and each stream's first event."""
    limits = httpx.Limits(max_connections=c, max_keepalive_connections=c)
    async with httpx.AsyncClient(proxy=proxy, headers=HEADERS, timeout=60, limits=limits) as http:
        start = time.perf_counter()
        results = await asyncio.gather(
            *(one_stream(http, url, start) for _ in range(c)), return_exceptions=True
        )
        wall = time.perf_counter() - start
    errors = [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
    firsts = [r for r in results if isinstance(r, float)]
    return errors, wall, firsts


def ms(value: float) -> str:
    return "-" if value != value else f"{value * 1000:.1f} ms"  # NaN: no figure


def mib(kib: int) -> str:
    return f"{kib / 1024:.1f} MiB"


def median_or_nan(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def warnings_in(log: str) -> list[str]:
    """The log's WARNING/ERROR lines, without their timestamps."""
    return [
        line.split(" ", 2)[-1]
        for line in log.splitlines()
        if any(word in line for word in ("WARNING", "ERROR", "Traceback", "CRITICAL"))
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--restarts", type=int, default=5)
    args = parser.parse_args()
    if (missing := without_tailnet()) is not None:
        print(missing)
        return 2

    failures = 0
    odd: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-tsnet-"))
    net = Tailnet().start()
    servers: dict[str, Launched] = {}
    try:
        box = net.add_node("agentbox")  # user-1
        caller = net.add_node("callerbox", proxy=True)  # user-2
        urls = {"tsnet": f"http://{TSNET_HOST}.tail.test/", "tailscaled": f"http://{box.dns_name}/"}
        # One caller opens all the streams: the per-caller cap (32 by default) would
        # refuse the rest with 429, and the bench measures the transport, not the cap.
        streams_cap = f"max_streams_per_caller = {max(args.streams, 32)}\n"

        # The tailscaled way: a plain server on a unix socket, behind `tailscale serve`.
        plain_tmp, plain_state = tmp / "plain", tmp / "plain" / "state"
        plain_tmp.mkdir()
        plain_config = plain_tmp / "tailagent.toml"
        plain_config.write_text(f'{streams_cap}[access]\nallowed_logins = ["{CALLER_LOGIN}"]\n')
        plain_listen = f"unix:{plain_tmp / 'tailagent.sock'}"
        plain_args = ("--config", str(plain_config), "--tailscale-socket", str(box.socket),
                      "--public-url", f"http://{box.dns_name}")  # fmt: skip
        servers["tailscaled"] = launch(
            plain_tmp, plain_args, state_dir=plain_state, listen=plain_listen
        )
        box.tailscale("serve", "--bg", "--http=80", servers["tailscaled"].server.url)

        # The embedded way: tsnet in the server process (user-3).
        tsnet_tmp, tsnet_state = tmp / "tsnet", tmp / "tsnet" / "state"
        tsnet_tmp.mkdir()
        tsnet_config = tsnet_tmp / "tailagent.toml"
        tsnet_config.write_text(
            f'{streams_cap}[access]\nallowed_logins = ["{CALLER_LOGIN}"]\n'
            f'[tsnet]\nenabled = true\nhostname = "{TSNET_HOST}"\ncontrol_url = "{net.url}"\n'
        )
        tsnet_env = {**os.environ, **net.node_env()}
        tsnet_args = ("--config", str(tsnet_config))
        first_join = time.perf_counter()
        servers["tsnet"] = launch(
            tsnet_tmp, tsnet_args, state_dir=tsnet_state,
            env={**tsnet_env, "TS_AUTHKEY": "tskey-test"},
        )  # fmt: skip
        join_steps = servers["tsnet"].steps
        join_reach = reach(caller, urls["tsnet"] + "healthz", first_join)
        reach(caller, urls["tailscaled"] + "healthz", time.perf_counter())

        time.sleep(2.0)  # let both settle before reading idle memory
        idle = {way: memory(servers[way].server.process.pid) for way in WAYS}
        tailscaled_mem = memory(box.process.pid)

        # 1. Sequential SendMessage, alternating.
        seq, seq_failures = asyncio.run(sequential(caller.proxy, urls, args.requests))
        failures += seq_failures

        # 2. Concurrent streams, one way after the other.
        streams: dict[str, tuple[list[str], float, list[float]]] = {}
        for way in WAYS:
            streams[way] = asyncio.run(concurrent(caller.proxy, urls[way], args.streams))
            failures += len(streams[way][0])
            for error in sorted(set(streams[way][0]))[:5]:
                print(f"  via {way}: a stream failed: {error}")
        loaded = {way: memory(servers[way].server.process.pid) for way in WAYS}

        # 4. Restarts on the same state dir.
        restarts: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
        for way in WAYS:
            launched = servers.pop(way)
            odd += [f"{way}: {line}" for line in warnings_in(launched.server.log())]
            launched.stop()
            for _ in range(args.restarts):
                if way == "tsnet":
                    start = time.perf_counter()
                    launched = launch(tsnet_tmp, tsnet_args, state_dir=tsnet_state, env=tsnet_env)
                else:
                    start = time.perf_counter()
                    launched = launch(
                        plain_tmp, plain_args, state_dir=plain_state,
                        listen=plain_listen,
                    )  # fmt: skip
                servers[way] = launched
                launched.steps["tailnet"] = reach(caller, urls[way] + "healthz", start)
                restarts[way].append(launched.steps)
                odd += [f"{way} restart: {line}" for line in warnings_in(launched.server.log())]
                launched.stop()
                del servers[way]
    finally:
        for launched in servers.values():
            odd += [f"at exit: {line}" for line in warnings_in(launched.server.log())]
            launched.stop()
        net.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    # The figures.
    print(f"tailnet via caller's proxy; echo agent; {os.cpu_count()} CPUs")
    print(
        f"first join of the tsnet node (with TS_AUTHKEY): serving on "
        f"{join_steps['serving']:.2f} s, reachable from the caller {join_reach:.2f} s"
    )
    header = f"{'figure':<52}{'tsnet':>16}{'tailscaled+serve':>20}"
    rows: list[tuple[str, str, str]] = []
    med = {way: median_or_nan(seq[way]) for way in WAYS}
    rows.append((f"SendMessage median (x{args.requests})", ms(med["tsnet"]), ms(med["tailscaled"])))
    rows.append(("SendMessage p95", ms(pct(seq["tsnet"], 0.95)), ms(pct(seq["tailscaled"], 0.95))))
    for label, index in ((f"{args.streams} streams: errors", 0), ("  wall time", 1)):
        cells = []
        for way in WAYS:
            value = streams[way][index]
            cells.append(str(len(value)) if isinstance(value, list) else f"{value:.2f} s")
        rows.append((label, cells[0], cells[1]))
    firsts = {way: streams[way][2] for way in WAYS}
    rows.append(("  first event p50", *(ms(median_or_nan(firsts[w])) for w in WAYS)))
    rows.append(
        ("  first event p95", *(ms(pct(firsts[w], 0.95)) if firsts[w] else "-" for w in WAYS))
    )
    rows.append(("server VmRSS idle after start", *(mib(idle[w]["VmRSS"]) for w in WAYS)))
    rows.append(("server VmRSS after load", *(mib(loaded[w]["VmRSS"]) for w in WAYS)))
    rows.append(("server VmHWM (peak)", *(mib(loaded[w]["VmHWM"]) for w in WAYS)))
    rows.append(("agentbox tailscaled VmRSS idle", "-", mib(tailscaled_mem["VmRSS"])))
    for step, label in (
        ("serving", "`serving on` in log"),
        ("ready", "READY=1 (NOTIFY_SOCKET)"),
        ("healthz", "/healthz 200 on loopback"),
        ("tailnet", "/healthz 200 from the caller"),
    ):
        cells = [median_or_nan([r[step] for r in restarts[w]]) for w in WAYS]
        rows.append((f"restart -> {label}", *(f"{c:.2f} s" for c in cells)))
    print(header)
    print(f"(restart figures: medians of {args.restarts}, from Popen)")
    for label, a, b in rows:
        print(f"{label:<52}{a:>16}{b:>20}")
    print(
        f"SendMessage median ratio tsnet / tailscaled+serve: {med['tsnet'] / med['tailscaled']:.2f}"
    )
    for way in WAYS:
        each = ", ".join(f"{r['serving']:.2f}/{r['tailnet']:.2f}" for r in restarts[way])
        print(f"{way} restarts (serving on / from caller, s): {each}")
    if odd:
        print("server log warnings/errors (count x line):")
        for line, count in Counter(odd).most_common(10):
            print(f"  {count} x {line}")
    print("command: " + shlex.join([sys.executable, *sys.argv]))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
