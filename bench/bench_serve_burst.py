"""A burst of new connections through `tailscale serve`: to the TCP listener, and to the
unix socket.

One real tailnet on this machine (tests/real_tailnet.py: our control server, real
tailscaled nodes "agentbox" and "callerbox", in userspace networking as on a box
without a TUN device), and two tailagent servers with the echo agent on agentbox:
  - tcp: a loopback TCP listener behind `tailscale serve --http=80`;
  - unix: a unix-socket listener behind `tailscale serve --http=81`.
From callerbox's HTTP proxy, R rounds (the two ways alternating) of C concurrent
SendStreamingMessage streams, each on a new connection and read to its end.

What differs: every new connection from serve to the TCP listener costs a whois of its
loopback ip:port, which tailscaled cannot answer (serve registers none) until it has
waited ~180 ms, one at a time, holding its backend's lock; on the unix socket tailagent
asks whois for the forwarded peer's IP only, which a burst asks once.

Prints, per way: streams refused or failed, and the time from the burst's start to each
stream's first event (median, p95, max) and the burst's wall time (median of rounds).

Usage: python bench/bench_serve_burst.py [--streams 100] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_core import load, pct, without_tailnet
from bench.bench_tsnet import concurrent
from tests.conftest import RunningServer, start_server
from tests.real_tailnet import Tailnet
from tests.test_real_tailnet import CALLER_LOGIN

WAYS = {"tcp": 80, "unix": 81}


def serve(way: str, tmp: Path, box_socket: Path) -> RunningServer:
    config = tmp / f"{way}.toml"
    config.write_text(f'[access]\nallowed_logins = ["{CALLER_LOGIN}"]\n')
    listen = f"unix:{tmp / 'tailagent.sock'}" if way == "unix" else "127.0.0.1:0"
    return start_server(tmp / way, "--config", str(config), "--tailscale-socket",
                        str(box_socket), listen=listen)  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pause", type=float, default=3.0, help="seconds between bursts")
    args = parser.parse_args()
    if (missing := without_tailnet()) is not None:
        print(missing)
        return 2
    print(f"load average at the start: {load()}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-burst-"))
    net = Tailnet().start()
    servers: dict[str, RunningServer] = {}
    firsts: dict[str, list[float]] = {way: [] for way in WAYS}
    walls: dict[str, list[float]] = {way: [] for way in WAYS}
    errors: dict[str, list[str]] = {way: [] for way in WAYS}
    try:
        box = net.add_node("agentbox")  # user-1
        caller = net.add_node("callerbox", proxy=True)  # user-2
        for way, port in WAYS.items():
            servers[way] = serve(way, tmp, box.socket)
            backend = servers[way].url
            box.tailscale("serve", "--bg", f"--http={port}", backend)
        urls = {way: f"http://{box.dns_name}:{port}/" for way, port in WAYS.items()}
        for way in WAYS:  # warm: the first request over the tailnet opens its path
            asyncio.run(concurrent(caller.proxy, urls[way], 1))
        for _ in range(args.rounds):
            for way in WAYS:
                time.sleep(args.pause)
                failed, wall, first = asyncio.run(concurrent(caller.proxy, urls[way], args.streams))
                errors[way] += failed
                walls[way].append(wall)
                firsts[way] += first
    finally:
        for server in servers.values():
            server.stop()
        net.stop()
    print(f"{args.rounds} bursts of {args.streams} new streams per way, through serve (ms)")
    print(f"{'':<8}{'failed':>8}{'first p50':>11}{'p95':>9}{'max':>9}{'wall p50':>10}")
    for way in WAYS:
        values = firsts[way] or [float("nan")]
        row = (
            statistics.median(values) * 1000,
            pct(values, 0.95) * 1000,
            max(values) * 1000,
            statistics.median(walls[way]) * 1000,
        )
        print(f"{way:<8}{len(errors[way]):>8}" + "".join(f"{v:>10.0f}" for v in row))
        for error in sorted(set(errors[way]))[:3]:
            print(f"  {way}: {error}")
    ratio = statistics.median(firsts["tcp"]) / statistics.median(firsts["unix"])
    print(f"first-event p50, tcp / unix: {ratio:.1f}x")
    print(f"load average at the end: {load()}")
    print("command: python bench/bench_serve_burst.py " + " ".join(sys.argv[1:]))
    return 1 if any(errors.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
