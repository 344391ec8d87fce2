"""A 100 MB download through a fence's proxy against the same download direct (issue 54).

With `sandbox.network = "on"` (the default) a fenced agent reaches anything only through its
conversation's own proxy: curl inside speaks to the bridge on the fence's 127.0.0.1:3128
(netbridge.py, a Python process inside), which copies to the proxy's unix socket, which the
proxy (proxy.py, in the process that made the Sandbox: this one, on uvloop as the server
runs) copies to the origin. This bench serves --megabytes MB (10^6 bytes) from a plain
TCP/HTTP origin on 127.0.0.2:PORT (its own process, sending from memory), named in
`sandbox.allow_hosts` as the address and port, and times, alternating, --rounds times each:

  - direct: `curl --noproxy '*'` on the host, no fence, straight to the origin;
  - http: the same curl inside the real `Sandbox(...).fence(directory)` (network "on"),
    through the proxy variables the fence sets: a plain `GET http://...` the proxy
    forwards (proxy.py's relay_response);
  - connect: the same with `--proxytunnel`, so the proxy opens a CONNECT tunnel and copies
    both ways (proxy.py's tunnel and pipe), as every https download does;
  - relay: no fence, but one process in between: `curl --noproxy '*'` to a relay on
    127.0.0.3 (its own process) that moves each connection's bytes to the origin and back
    with os.splice, kernel to kernel, no copy through Python, a thread per direction. The
    fence has two such hops (its bridge inside, the proxy outside); this is the ceiling of
    any design with even one, on this box.

Each figure is curl's own `%{speed_download}` (bytes over the transfer, the fence's start
excluded) and the whole command's wall time (bwrap's start included). It prints medians,
min and max per way, and each fenced way's median over direct's.

With --rate R the origin sends no faster than R MB/s, as a link of that speed would (a
gigabit link carries at most 125 MB/s): whether the fence keeps up with a real link,
where the bare loopback measures what its copies cost.

Usage: python bench/bench_fence_download.py [--rounds 7] [--megabytes 100] [--rate 0]
    [--only http,connect,relay] [--loop uvloop|asyncio] [--profile FILE]
(--profile writes a cProfile of this process, the proxy's side, to FILE.)
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_core import load
from tailagent.config import SandboxSettings
from tailagent.sandbox.fences import Sandbox

HOST = "127.0.0.2"
# The origin: one HTTP answer of SIZE bytes per connection, from a 1 MiB block in memory,
# a thread per connection, paced to RATE bytes a second unless RATE is 0; it prints its
# port once it listens.
ORIGIN = """
import socket, sys, threading, time
host, size, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
block = memoryview(b"x" * (1 << 20))
def answer(conn):
    with conn:
        head = b""
        while b"\\r\\n\\r\\n" not in head:
            data = conn.recv(65536)
            if not data:
                return
            head += data
        if head.startswith(b"CONNECT "):
            return
        conn.sendall(b"HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\n"
                     b"Connection: close\\r\\n\\r\\n" % size)
        left, started = size, time.monotonic()
        try:
            while left:
                left -= conn.send(block[: min(left, len(block))])
                if rate:  # paced: never ahead of `rate` bytes a second
                    time.sleep(max(0.0, started + (size - left) / rate - time.monotonic()))
        except OSError:
            pass
listener = socket.create_server((host, 0))
print(listener.getsockname()[1], flush=True)
while True:
    conn, _ = listener.accept()
    threading.Thread(target=answer, args=(conn,), daemon=True).start()
"""
# The relay: listens on RELAY_HOST, prints its port, and splices each connection to the
# origin at HOST:argv[1] through a pipe of 1 MiB per direction.
RELAY = """
import fcntl, os, socket, sys, threading
origin = (sys.argv[1], int(sys.argv[2]))
def pump(source, sink):
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, 1031, 1 << 20)  # F_SETPIPE_SZ
    try:
        while moved := os.splice(source.fileno(), write_end, 1 << 20):
            while moved:
                moved -= os.splice(read_end, sink.fileno(), moved)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        os.close(read_end)
        os.close(write_end)
listener = socket.create_server((sys.argv[3], 0))
print(listener.getsockname()[1], flush=True)
while True:
    conn, _ = listener.accept()
    upstream = socket.create_connection(origin)
    for source, sink in ((conn, upstream), (upstream, conn)):
        threading.Thread(target=pump, args=(source, sink), daemon=True).start()
"""
RELAY_HOST = "127.0.0.3"
CURL = ["curl", "-sS", "-o", "/dev/null", "-w", "%{speed_download} %{size_download}"]
WAYS = ("direct", "http", "connect", "relay")


async def timed(argv: list[str], size: int) -> tuple[float, float]:
    """curl's download speed (bytes/s) and the command's wall time (s)."""
    started = time.perf_counter()
    child = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await child.communicate()
    wall = time.perf_counter() - started
    if child.returncode != 0:
        raise SystemExit(f"{argv[-1]} failed ({child.returncode}): {stderr.decode()[-500:]}")
    speed, got = stdout.decode().split()
    if int(got) != size:
        raise SystemExit(f"got {got} bytes of {size}: {stderr.decode()[-500:]}")
    return float(speed.replace(",", ".")), wall


async def measure(
    rounds: int, megabytes: int, rate: float, ways: list[str], profile: str | None
) -> None:
    size = megabytes * 1_000_000
    origin = await asyncio.create_subprocess_exec(
        *(sys.executable, "-I", "-c", ORIGIN, HOST, str(size), str(rate * 1e6)),
        stdout=asyncio.subprocess.PIPE,
    )
    assert origin.stdout is not None
    port = int(await origin.stdout.readline())
    url = f"http://{HOST}:{port}/download"
    relay = await asyncio.create_subprocess_exec(
        *(sys.executable, "-I", "-c", RELAY, HOST, str(port), RELAY_HOST),
        stdout=asyncio.subprocess.PIPE,
    )
    assert relay.stdout is not None
    relayed = f"http://{RELAY_HOST}:{int(await relay.stdout.readline())}/download"
    tmp = Path(tempfile.mkdtemp(prefix="ta-bench-download-", dir="/var/tmp"))
    os.environ["HOME"] = str(tmp / "home")  # a home of nobody's: the fence's own is empty
    (tmp / "home").mkdir()
    settings = SandboxSettings(allow_hosts=(f"{HOST}:{port}",))  # network "on", the default
    sandbox = Sandbox(settings, agent="custom", state_dir=tmp / "state")
    profiler = cProfile.Profile() if profile else None
    try:
        await sandbox.start()
        directory = tmp / "conversation"
        directory.mkdir()
        fence = sandbox.fence(directory)
        assert fence.network == "on" and fence.options, "not fenced"
        argv = {
            "direct": [*CURL, "--noproxy", "*", url],
            "http": fence.wrap([*CURL, url]),
            "connect": fence.wrap([*CURL, "--proxytunnel", url]),
            "relay": [*CURL, "--noproxy", "*", relayed],
        }
        times: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
        for way in ways:  # one not counted: the page cache, the proxy's first connection
            await timed(argv[way], size)
        if profiler:
            profiler.enable()
        for n in range(rounds):
            for way in ways if n % 2 == 0 else ways[::-1]:
                times[way].append(await timed(argv[way], size))
        if profiler:
            profiler.disable()
            profiler.dump_stats(profile)
        if sandbox.proxy_refusals():
            raise SystemExit(f"the proxy refused {sandbox.proxy_refusals()} connections")
    finally:
        await sandbox.aclose()
        for process in (origin, relay):
            process.kill()
            await process.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    direct = statistics.median(s for s, _ in times["direct"]) if "direct" in times else None
    paced = f", the origin paced to {rate:g} MB/s" if rate else ""
    print(f"{megabytes} MB from {url}{paced}, {rounds} rounds alternating; load after: {load()}")
    for way in ways:
        speeds = [s / 1e6 for s, _ in times[way]]
        walls = [w * 1000 for _, w in times[way]]
        median = statistics.median(speeds)
        ratio = f"   {median * 1e6 / direct:.2f}x direct" if direct and way != "direct" else ""
        print(
            f"{way:8} median {median:7.0f} MB/s (min {min(speeds):5.0f}, max {max(speeds):5.0f})"
            f"   wall median {statistics.median(walls):6.0f} ms"
            f" ({min(walls):.0f} – {max(walls):.0f}){ratio}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--rate", type=float, default=0.0, help="pace the origin, MB/s")
    parser.add_argument("--only", default="http,connect,relay", help="of http,connect,relay")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    parser.add_argument("--profile", default=None)
    options = parser.parse_args()
    ways = ["direct", *(w for w in options.only.split(",") if w in WAYS[1:])]
    print(f"load at the start: {load()}", flush=True)
    job = measure(options.rounds, options.megabytes, options.rate, ways, options.profile)
    if options.loop == "uvloop":
        import uvloop

        uvloop.run(job)
    else:
        asyncio.run(job)


if __name__ == "__main__":
    main()
