"""What the sandbox's one way out costs a connection: bridge and allowlist proxy (issue 41).

A fenced agent with `sandbox.network = "allowlist"` reaches an allowed host through the
bridge on its own 127.0.0.1:PORT (netbridge.py), the proxy's unix socket and the proxy
(proxy.py), which checks the host and connects. This measures, on this box's loopback,
one connection's time from `connect()` to the first byte echoed back, in a client
process that does it --runs times (median, p90):
  - direct: the client connects to a TCP echo on 127.0.0.1 and sends one byte;
  - proxy: the client connects to the proxy's unix socket itself, sends `CONNECT
    127.0.0.1:ECHO`, reads the 200, sends one byte (the proxy's part alone);
  - bridge: the client connects to the bridge (run here, no sandbox), sends
    `CONNECT 127.0.0.1:ECHO`, reads the 200, sends one byte;
  - bwrap: the same from inside `bwrap --unshare-net` (the bridge in the sandbox's
    own namespace, as an agent gets it).
The added latency is the bridge's or bwrap's median less direct's. The echo and the proxy
run in this process, on uvloop as the server does (`--loop asyncio` for asyncio's own).

Usage: python bench/bench_sandbox_network.py [--runs 50] [--host 127.0.0.1] [--loop uvloop]
(`--host localhost` names the origin, so each CONNECT costs the proxy a getaddrinfo too.)
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
from tailagent.sandbox.proxy import AllowlistProxy, bridge_argv, proxy_env

BWRAP = "/usr/bin/bwrap"
PYTHON = str(Path(sys.executable).resolve())
BRIDGE_PORT = 3128

CLIENT = """
import json, socket, sys, time
mode, port, target, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
times = []
for _ in range(runs):
    started = time.perf_counter()
    if mode == "unix":
        s = socket.socket(socket.AF_UNIX)
        s.connect(sys.argv[5])
    else:
        s = socket.create_connection(("127.0.0.1", port))
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


async def client(argv: list[str], env: dict[str, str] | None = None) -> list[float]:
    child = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, env=env)
    stdout, _ = await child.communicate()
    if child.returncode != 0:
        raise SystemExit(f"the client failed ({child.returncode}): {argv[:3]}")
    return json.loads(stdout)


def line(name: str, times: list[float], base: float | None) -> str:
    median = statistics.median(times) * 1e6
    p90 = statistics.quantiles(times, n=10)[-1] * 1e6
    added = "" if base is None else f"   added {median - base:7.0f} µs"
    return f"{name:8} median {median:7.0f} µs   p90 {p90:7.0f} µs{added}"


async def measure(runs: int, host: str) -> None:
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    sockdir = Path(tempfile.mkdtemp(prefix="ta-bench-"))
    allow = [f"{host}:{port}", f"127.0.0.1:{port}"]
    target = f"{host}:{port}"
    script = ["-I", "-c", CLIENT]
    try:
        async with AllowlistProxy(sockdir / "proxy.sock", allow) as proxy:
            direct = await client([PYTHON, *script, "direct", str(port), "", str(runs)])
            args = ["unix", "0", target, str(runs), str(proxy.path)]
            unix = await client([PYTHON, *script, *args])
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                free = probe.getsockname()[1]
            prefix = bridge_argv(PYTHON, str(proxy.path), free)
            bridged = await client(
                [*prefix, PYTHON, *script, "connect", str(free), target, str(runs)]
            )
            prefix = bridge_argv(PYTHON, str(proxy.path), BRIDGE_PORT)
            fence = [
                BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                "--unshare-net", "--unshare-pid", "--bind", str(sockdir), str(sockdir),
                "--die-with-parent",
            ]  # fmt: skip
            env = os.environ | proxy_env(BRIDGE_PORT)
            args = ["connect", str(BRIDGE_PORT), target, str(runs)]
            fenced = await client([*fence, *prefix, PYTHON, *script, *args], env)
            if proxy.refused:
                raise SystemExit(f"refused: {proxy.refused}")
    finally:
        server.close()
        shutil.rmtree(sockdir, ignore_errors=True)
    base = statistics.median(direct) * 1e6
    print(f"{runs} connections each, connect to first byte echoed, CONNECT {target}")
    print(line("direct", direct, None))
    print(line("proxy", unix, base))
    print(line("bridge", bridged, base))
    print(line("bwrap", fenced, base))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    options = parser.parse_args()
    if options.loop == "uvloop":
        import uvloop

        uvloop.run(measure(options.runs, options.host))
    else:
        asyncio.run(measure(options.runs, options.host))


if __name__ == "__main__":
    main()
