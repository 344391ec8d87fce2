"""The fence's proxy as `sandbox.network = "on"` uses it (issue 54): the public internet
on any port, through CONNECT or SOCKS5 on the same socket, and never loopback, private or
tailnet addresses, or this box's own, unless an address is named.

Real sockets throughout: the proxy on a unix socket, a TCP echo on loopback, and for the
box's own public address a network namespace of the test's own with such an address.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tailagent.sandbox.allowlist import Allowlist
from tailagent.sandbox.proxy import AllowlistProxy, on_this_box


@pytest.fixture
def sockdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ta-socks-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


@contextlib.asynccontextmanager
async def proxy_of(sockdir: Path, named: list[str]) -> AsyncIterator[AllowlistProxy]:
    """The proxy of network "on": public, `named` unlocking addresses."""
    allow = Allowlist.parse(named, public=True)
    async with AllowlistProxy(sockdir / "proxy.sock", allow) as proxy:
        yield proxy


def socks_request(host: str, port: int) -> bytes:
    """A SOCKS5 greeting (no authentication) and CONNECT, the host as its type says."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        target = bytes([3, len(host)]) + host.encode()
    else:
        target = bytes([1 if address.version == 4 else 4]) + address.packed
    return b"\x05\x01\x00" + b"\x05\x01\x00" + target + struct.pack("!H", port)


async def socks(proxy: AllowlistProxy, host: str, port: int) -> tuple[int, bytes]:
    """The reply code of a SOCKS5 CONNECT, and what an echo behind it sends back."""
    reader, writer = await asyncio.open_unix_connection(str(proxy.path))
    try:
        writer.write(socks_request(host, port))
        assert await asyncio.wait_for(reader.readexactly(2), 5) == b"\x05\x00"
        reply = await asyncio.wait_for(reader.readexactly(10), 5)
        assert reply[0] == 5
        if reply[1] != 0:
            assert await asyncio.wait_for(reader.read(), 5) == b""  # closed after it
            return reply[1], b""
        writer.write(b"through socks")
        return 0, await asyncio.wait_for(reader.readexactly(13), 5)
    finally:
        writer.close()


async def http_connect(proxy: AllowlistProxy, target: str) -> str:
    reader, writer = await asyncio.open_unix_connection(str(proxy.path))
    try:
        writer.write(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        return (await asyncio.wait_for(reader.readuntil(b"\r\n"), 5)).decode().strip()
    finally:
        writer.close()


async def test_socks5_and_connect_share_one_socket(sockdir: Path, echo_port: int) -> None:
    async with proxy_of(sockdir, [f"127.0.0.1:{echo_port}"]) as proxy:
        assert await socks(proxy, "127.0.0.1", echo_port) == (0, b"through socks")
        assert await http_connect(proxy, f"127.0.0.1:{echo_port}") == (
            "HTTP/1.1 200 Connection established"
        )
        assert proxy.refused == {}


async def test_socks5_refusals_are_socks_replies_counted_and_logged(
    sockdir: Path, echo_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tailagent.sandbox")
    async with proxy_of(sockdir, []) as proxy:
        # 2: "connection not allowed by ruleset", for a name and an address alike.
        assert await socks(proxy, "localhost", echo_port) == (2, b"")
        assert await socks(proxy, "127.0.0.1", echo_port) == (2, b"")
        assert await socks(proxy, "::1", echo_port) == (2, b"")
        assert await socks(proxy, "100.100.100.100", 53) == (2, b"")
        assert await socks(proxy, "fd7a:115c:a1e0::1", 443) == (2, b"")
        assert proxy.refused == {
            "localhost": 1,
            "127.0.0.1": 1,
            "::1": 1,
            "100.100.100.100": 1,
            "fd7a:115c:a1e0::1": 1,
        }
    said = [r.getMessage() for r in caplog.records if r.name == "tailagent.sandbox"]
    assert any("localhost resolves to loopback address" in line for line in said)


async def test_socks5_commands_other_than_connect_are_refused(sockdir: Path) -> None:
    async with proxy_of(sockdir, []) as proxy:
        reader, writer = await asyncio.open_unix_connection(str(proxy.path))
        # BIND (2) to 8.8.8.8:53: "command not supported" (7), nothing opened.
        writer.write(b"\x05\x01\x00\x05\x02\x00\x01\x08\x08\x08\x08\x00\x35")
        assert await asyncio.wait_for(reader.readexactly(2), 5) == b"\x05\x00"
        assert (await asyncio.wait_for(reader.readexactly(10), 5))[1] == 7
        writer.close()
        # A client that offers only username/password gets "no acceptable method".
        reader, writer = await asyncio.open_unix_connection(str(proxy.path))
        writer.write(b"\x05\x01\x02")
        assert await asyncio.wait_for(reader.read(), 5) == b"\x05\xff"
        writer.close()


def test_on_any_name_and_port_passes_the_first_step_addresses_still_checked() -> None:
    """With "on", names are not listed: what they resolve to is what is checked."""
    allow = Allowlist.parse([], public=True)
    assert allow.host_refusal("github.com", 22) is None
    assert allow.host_refusal("db.example.net", 5432) is None
    assert allow.host_refusal("8.8.8.8", 53) is None
    assert allow.host_refusal("100.100.100.100", 80) == (
        'tailnet address refused: 100.100.100.100 (add "100.100.100.100:80" to '
        "sandbox.allow_hosts to allow it)"
    )
    private = ipaddress.ip_address("10.1.2.3")
    assert allow.address_refusal(private, 443, "git.corp") == (
        "git.corp resolves to private address 10.1.2.3, refused: naming git.corp does not "
        'allow it; add the address ("10.1.2.3:443", or a CIDR around it) to sandbox.allow_hosts'
    )
    named = Allowlist.parse(["10.0.0.0/8:443"], public=True)
    assert named.address_refusal(private, 443, "git.corp") is None
    assert named.address_refusal(private, 22, "git.corp") is not None


def test_this_box_is_known_by_its_addresses() -> None:
    assert on_this_box(ipaddress.ip_address("127.0.0.1"))
    assert not on_this_box(ipaddress.ip_address("100.100.100.100"))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            pytest.skip("no route off the box to find its own address by")
        own = probe.getsockname()[0]
    assert on_this_box(ipaddress.ip_address(own))


NAMESPACE_SCRIPT = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from tailagent.sandbox.allowlist import Allowlist
from tailagent.sandbox.proxy import AllowlistProxy

async def main():
    server = await asyncio.start_server(lambda r, w: w.close(), "1.2.3.4", 8080)
    for named in ([], ["1.2.3.4:8080"]):
        proxy = AllowlistProxy(sys.argv[2], Allowlist.parse(named, public=True))
        await proxy.start()
        reader, writer = await asyncio.open_unix_connection(sys.argv[2])
        writer.write(b"CONNECT 1.2.3.4:8080 HTTP/1.1\\r\\n\\r\\n")
        print((await reader.read()).decode().split("\\r\\n")[0], flush=True)
        writer.close()
        await proxy.aclose()
    server.close()

asyncio.run(main())
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("ip") is None,
    reason="needs root, unshare and ip to give a namespace a public address",
)
def test_the_box_s_own_public_address_is_refused_unless_named(sockdir: Path) -> None:
    """A service that listens on every address answers at the box's public one too: in a
    network namespace of the test's own holding 1.2.3.4, the proxy refuses 1.2.3.4."""
    setup = 'ip link set lo up && ip addr add 1.2.3.4/32 dev lo && exec "$@"'
    root = str(Path(__file__).resolve().parents[1])
    done = subprocess.run(
        ["unshare", "--net", "sh", "-c", setup, "sh", sys.executable, "-c", NAMESPACE_SCRIPT,
         root, str(sockdir / "proxy.sock")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    refused, allowed = done.stdout.splitlines()
    assert refused == "HTTP/1.1 403 Forbidden"
    assert allowed == "HTTP/1.1 200 Connection established"
