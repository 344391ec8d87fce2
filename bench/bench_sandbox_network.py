"""What the fence's one way out costs a connection: bridge and proxy (issues 41 and 54).

A fenced agent (every network mode but `none` since issue 54; `sandbox.network = "on"`,
the default, here) reaches a host only through the bridge on its own 127.0.0.1:3128
(netbridge.py), its conversation's proxy socket and the proxy (proxy.py), which checks the
host and connects. This measures, on this box's loopback, one connection's time from
`connect()` to the first byte echoed back, in a client process that does it --runs times
(median, p90), to a TCP echo on 127.0.0.2 named in `sandbox.allow_hosts` (a loopback
address is reached only when named):
  - direct: the client connects to the echo and sends one byte;
  - proxy: the client connects to the conversation's proxy socket itself, sends `CONNECT
    127.0.0.2:ECHO`, reads the 200, sends one byte (the proxy's part alone);
  - bridge: the client connects to a bridge run here (no fence) to that socket, sends
    the CONNECT, reads the 200, sends one byte;
  - fence: the same from inside the real fence, `Sandbox(...).fence(directory).wrap(...)`
    with network "on": bwrap, its network namespace, the seccomp filter, the bridge the
    fence runs ahead of the client, as an agent gets it.
The added latency is each way's median less direct's. The echo and the proxy run in this
process, on uvloop as the server does (`--loop asyncio` for asyncio's own). The proxy is
the fence's own (the one its conversation gets) for all three ways through it.

Usage: python bench/bench_sandbox_network.py [--runs 50] [--loop uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tailagent.config import SandboxSettings
from tailagent.sandbox.exits import PROXY_PORT
from tailagent.sandbox.fences import Sandbox
from tailagent.sandbox.proxy import bridge_argv

PYTHON = str(Path(sys.executable).resolve())
HOST = "127.0.0.2"

CLIENT = """
import json, socket, sys, time
mode, port, target, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
times = []
for _ in range(runs):
    started = time.perf_counter()
    if mode == "unix":
        s = socket.socket(socket.AF_UNIX)
        s.connect(sys.argv[5])
    else:  # direct: to the echo itself; connect: to a bridge on this loopback
        host = target.rsplit(":", 1)[0] if mode == "direct" else "127.0.0.1"
        s = socket.create_connection((host, port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if mode != "direct":
        s.sendall(b"CONNECT " + target.encode() + b" HTTP/1.1\\r\\n\\r\\n")
        head = b""
        while not head.endswith(b"\\r\\n\\r\\n"):
            head += s.recv(1)
        assert head.startswith(b"HTTP/1.1 200 "), head
    s.sendall(b"x")
    assert s.recv(1) == b"x"
    times.append(time.perf_counter() - started)
    s.close()
print(json.dumps(times))
"""


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    writer.close()


async def client(argv: list[str]) -> list[float]:
    child = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    stdout, _ = await child.communicate()
    if child.returncode != 0:
        raise SystemExit(f"the client failed ({child.returncode}): {argv[:3]}")
    return json.loads(stdout)


def line(name: str, times: list[float], base: float | None) -> str:
    median = statistics.median(times) * 1e6
    p90 = statistics.quantiles(times, n=10)[-1] * 1e6
    added = "" if base is None else f"   added {median - base:7.0f} µs"
    return f"{name:8} median {median:7.0f} µs   p90 {p90:7.0f} µs{added}"


async def measure(runs: int) -> None:
    server = await asyncio.start_server(echo, HOST, 0)
    port = server.sockets[0].getsockname()[1]
    target = f"{HOST}:{port}"
    tmp = Path(tempfile.mkdtemp(prefix="ta-bench-network-", dir="/var/tmp"))
    os.environ["HOME"] = str(tmp / "home")  # a home of nobody's: the fence's own is empty
    (tmp / "home").mkdir()
    # network "on", the default: the echo's loopback address is reached because it is named
    settings = SandboxSettings(allow_hosts=(target,))
    sandbox = Sandbox(settings, agent="custom", state_dir=tmp / "state")
    script = ["-I", "-c", CLIENT]
    try:
        await sandbox.start()
        (tmp / "conversation").mkdir()
        fence = sandbox.fence(tmp / "conversation")
        assert fence.network == "on" and fence.options and fence.private, "not fenced"
        socket_path = fence.private / "net-on" / "proxy.sock"  # the fence's own proxy
        assert socket_path.exists(), socket_path
        direct = await client([PYTHON, *script, "direct", str(port), target, str(runs)])
        args = ["unix", "0", target, str(runs), str(socket_path)]
        unix = await client([PYTHON, *script, *args])
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            free = probe.getsockname()[1]
        prefix = bridge_argv(PYTHON, str(socket_path), free)
        bridged = await client([*prefix, PYTHON, *script, "connect", str(free), target, str(runs)])
        args = ["connect", str(PROXY_PORT), target, str(runs)]
        fenced = await client(fence.wrap([PYTHON, *script, *args]))
        if sandbox.proxy_refusals():
            raise SystemExit(f"the proxy refused {sandbox.proxy_refusals()} connections")
    finally:
        await sandbox.aclose()
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    base = statistics.median(direct) * 1e6
    print(f"{runs} connections each, connect to first byte echoed, CONNECT {target}")
    print(line("direct", direct, None))
    print(line("proxy", unix, base))
    print(line("bridge", bridged, base))
    print(line("fence", fenced, base))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    options = parser.parse_args()
    if options.loop == "uvloop":
        import uvloop

        uvloop.run(measure(options.runs))
    else:
        asyncio.run(measure(options.runs))


if __name__ == "__main__":
    main()
