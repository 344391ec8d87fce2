"""The sandbox's one way out (issue 41): the allowlist proxy on a unix socket, the bridge
that brings it into a network namespace, and the two together under bubblewrap.

Everything here is real sockets: an HTTP origin and a TCP echo on this box's loopback,
the proxy on a unix socket, the bridge as its own process, bwrap's own namespace.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import logging
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tailagent.sandbox import splicing
from tailagent.sandbox.allowlist import Allowlist
from tailagent.sandbox.proxy import NETBRIDGE, AllowlistProxy, bridge_argv, proxy_env

BWRAP = Path("/usr/bin/bwrap")
PYTHON = str(Path(sys.executable).resolve())
needs_bwrap = pytest.mark.skipif(
    not os.access(BWRAP, os.X_OK), reason="no /usr/bin/bwrap (apt-get install bubblewrap)"
)
BRIDGE_PORT = 3128  # inside the sandbox's own namespace: any port is free there


# --- the origins: an HTTP server that says what it was sent, and a TCP echo ---------------


async def read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if headers.get("transfer-encoding") == "chunked":
        body = b""
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            body += (await reader.readexactly(size + 2))[:-2]
        await reader.readuntil(b"\r\n")
        return body
    return await reader.readexactly(int(headers.get("content-length", "0")))


async def http_origin(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers one request with JSON: its request line, headers and body."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")[:-2]
    pairs = [line.split(":", 1) for line in head[1:]]
    headers = {key.strip().lower(): value.strip() for key, value in pairs}
    if headers.get("expect") == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    body = await read_body(reader, headers)
    said = json.dumps({"line": head[0], "headers": pairs, "body": body.decode()}).encode()
    writer.write(
        b"HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nConnection: keep-alive\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(said), said)
    )
    await writer.drain()
    writer.close()


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Every byte back, and EOF back after EOF."""
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.write_eof()
        await writer.drain()
    writer.close()


@pytest.fixture
async def origin() -> AsyncIterator[int]:
    server = await asyncio.start_server(http_origin, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


@pytest.fixture
def sockdir() -> Iterator[Path]:
    """A short directory for unix sockets (their paths are limited to 107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="ta-net-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@contextlib.asynccontextmanager
async def running(sockdir: Path, allow: list[str], **options: Any) -> AsyncIterator[AllowlistProxy]:
    async with AllowlistProxy(sockdir / "proxy.sock", allow, **options) as proxy:
        yield proxy


async def ask(proxy: AllowlistProxy, raw: bytes) -> bytes:
    """What the proxy answers to `raw`, read until it closes."""
    reader, writer = await asyncio.open_unix_connection(str(proxy.path))
    writer.write(raw)
    try:
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


def answer(raw: bytes) -> tuple[int, dict[str, str], str]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body.decode()


async def connect(proxy: AllowlistProxy, target: str) -> tuple[int, str]:
    """The status of a CONNECT, and the body of a refusal (a tunnel is closed at once)."""
    reader, writer = await asyncio.open_unix_connection(str(proxy.path))
    writer.write(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        status, _, _ = answer(head)
        body = b"" if status == 200 else await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
    return status, body.decode().strip()


# --- the decisions ------------------------------------------------------------------------


async def test_a_connect_to_a_named_address_tunnels_both_ways_and_half_closes(
    sockdir: Path, echo_port: int
) -> None:
    async with running(sockdir, [f"127.0.0.1:{echo_port}"]) as proxy:
        reader, writer = await asyncio.open_unix_connection(str(proxy.path))
        writer.write(f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection established\r\n\r\n"
        writer.write(b"x" * 300_000)
        writer.write_eof()  # the client is done sending, and still reads every byte back
        assert await asyncio.wait_for(reader.read(), 5) == b"x" * 300_000
        writer.close()


async def test_a_host_not_named_is_refused_saying_why_logged_once_and_counted(
    sockdir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tailagent.sandbox")
    async with running(sockdir, ["example.com"]) as proxy:
        for _ in range(3):
            assert await connect(proxy, "evil.example:443") == (403, NOT_NAMED)
        status, _, body = answer(await ask(proxy, b"GET http://Evil.Example./x HTTP/1.1\r\n\r\n"))
        assert (status, body) == (403, NOT_NAMED + "\n")
        assert proxy.refused == {"evil.example": 4}
    said = [r.getMessage() for r in caplog.records if r.name == "tailagent.sandbox"]
    assert said == [f"sandbox proxy refused evil.example: {NOT_NAMED}"]


NOT_NAMED = 'not in sandbox.allow_hosts: evil.example (add "evil.example" to allow it)'


async def test_localhost_is_refused_by_default(sockdir: Path, echo_port: int) -> None:
    async with running(sockdir, []) as proxy:
        assert await connect(proxy, f"localhost:{echo_port}") == (
            403,
            f'not in sandbox.allow_hosts: localhost (add "localhost:{echo_port}" to allow it)',
        )
        assert await connect(proxy, f"127.0.0.1:{echo_port}") == (
            403,
            f'loopback address refused: 127.0.0.1 (add "127.0.0.1:{echo_port}" to '
            "sandbox.allow_hosts to allow it)",
        )


async def test_a_name_never_unlocks_a_private_address_its_dns_gives(
    sockdir: Path, echo_port: int
) -> None:
    """DNS rebinding: an allowed name resolving to loopback is refused; naming the address
    (or a CIDR around it) as well is what allows it."""
    async with running(sockdir, [f"localhost:{echo_port}"]) as proxy:
        status, said = await connect(proxy, f"localhost:{echo_port}")
        assert status == 403
        # What to do, when the name is named already: name the address.
        assert said.startswith("localhost resolves to loopback address ")
        assert said.endswith(f':{echo_port}", or a CIDR around it) to sandbox.allow_hosts')
        assert "naming localhost does not allow it; add the address (" in said
        assert proxy.refused == {"localhost": 1}
    named = [f"localhost:{echo_port}", f"127.0.0.0/8:{echo_port}", f"[::1]:{echo_port}"]
    async with running(sockdir, named) as proxy:
        assert (await connect(proxy, f"localhost:{echo_port}"))[0] == 200
        # The address is named on that port only.
        assert (await connect(proxy, "127.0.0.1:443"))[0] == 403


@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("10.0.0.1:443", "private address refused: 10.0.0.1"),
        ("100.64.0.1:443", "tailnet address refused: 100.64.0.1"),
        ("100.101.102.103:80", "tailnet address refused: 100.101.102.103"),
        ("[fd7a:115c:a1e0::1]:443", "tailnet address refused: fd7a:115c:a1e0::1"),
        ("[fd7a:115c:a1e0:ab12::1]:443", "tailnet address refused: fd7a:115c:a1e0:ab12::1"),
        ("169.254.169.254:80", "link-local address refused: 169.254.169.254"),
        ("[::1]:443", "loopback address refused: ::1"),
        ("[::ffff:127.0.0.1]:443", "loopback address refused: 127.0.0.1"),
        ("[::ffff:100.64.0.1]:443", "tailnet address refused: 100.64.0.1"),
        ("[64:ff9b::a00:1]:443", "private address refused: 64:ff9b::a00:1"),
        ("0.0.0.0:443", "unspecified address refused: 0.0.0.0"),
        ("224.0.0.1:443", "multicast address refused: 224.0.0.1"),
        ("[fe80::1]:443", "link-local address refused: fe80::1"),
        ("[fd00::1]:443", "private address refused: fd00::1"),
    ],
)
async def test_addresses_that_are_not_public_are_refused_unless_named(
    sockdir: Path, target: str, said: str
) -> None:
    async with running(sockdir, ["*.example.com", "8.8.8.8"]) as proxy:
        status, text = await connect(proxy, target)
        assert status == 403
        assert text.startswith(f'{said} (add "')
        assert text.endswith('" to sandbox.allow_hosts to allow it)')


async def test_a_named_cidr_lets_its_addresses_through(sockdir: Path) -> None:
    """Named, a tailnet address is no longer refused: the proxy goes on to connect (to
    whatever is, or is not, there)."""
    async with running(sockdir, ["100.64.0.0/10"], connect_timeout=0.5) as proxy:
        status, said = await connect(proxy, "100.64.0.1:443")
        assert status in (200, 502, 504), said
        assert proxy.refused == {}


async def test_ports_other_than_80_and_443_only_when_named(sockdir: Path) -> None:
    async with running(sockdir, ["example.com", "api.example.com:8443", "8.8.8.8"]) as proxy:
        assert await connect(proxy, "example.com:22") == (
            403,
            "port 22 of example.com not in sandbox.allow_hosts (it allows 80, 443)",
        )
        assert await connect(proxy, "api.example.com:443") == (
            403,
            "port 443 of api.example.com not in sandbox.allow_hosts (it allows 8443)",
        )
        assert await connect(proxy, "8.8.8.8:53") == (
            403,
            "port 53 of 8.8.8.8 not in sandbox.allow_hosts",
        )


def test_the_allowlist_reads_names_patterns_addresses_and_ports() -> None:
    allow = Allowlist.parse(
        ["Example.COM", "*.corp.example", "git.example.org:8443", "[2001:db8::5]:22", "fd00::/8"]
    )
    assert allow.host_refusal("example.com", 443) is None
    assert allow.host_refusal("a.corp.example", 80) is None
    assert allow.host_refusal("a.b.corp.example", 443) is None
    assert allow.host_refusal("corp.example", 443) == (
        'not in sandbox.allow_hosts: corp.example (add "corp.example" to allow it)'
    )
    assert allow.host_refusal("evilcorp.example", 443) is not None
    assert allow.host_refusal("git.example.org", 8443) is None
    assert allow.host_refusal("git.example.org", 443) is not None
    assert allow.host_refusal("2001:db8::5", 22) is None
    assert allow.host_refusal("fd00::1234", 443) is None


@pytest.mark.parametrize(
    "entry",
    ["", "*", "*.", "a.*.example.com", "10.0.0.1/8", "example.com:0", "exa mple.com", "a:b"],
)
def test_an_allowlist_entry_of_no_known_form_is_refused_naming_it(entry: str) -> None:
    with pytest.raises(ValueError, match=r"sandbox\.allow_hosts: "):
        Allowlist.parse(["example.com", entry])


# --- plain HTTP -----------------------------------------------------------------------------


async def test_plain_http_is_forwarded_in_origin_form_without_proxy_headers(
    sockdir: Path, origin: int
) -> None:
    async with running(sockdir, [f"127.0.0.1:{origin}"]) as proxy:
        raw = await ask(
            proxy,
            f"GET http://127.0.0.1:{origin}/path?q=1#frag HTTP/1.1\r\n"
            "Host: elsewhere.example\r\nProxy-Connection: keep-alive\r\n"
            "Proxy-Authorization: Basic c2VjcmV0\r\nConnection: keep-alive, X-Hop\r\n"
            "X-Hop: gone\r\nUser-Agent: test\r\nTE: trailers\r\n\r\n".encode(),
        )
    status, headers, body = answer(raw)
    assert status == 200
    assert headers["connection"] == "close"  # the client is told, not left to find out
    assert "keep-alive" not in headers
    seen = json.loads(body)
    assert seen["line"] == "GET /path?q=1 HTTP/1.1"
    assert [(k.lower(), v.strip()) for k, v in seen["headers"]] == [
        ("host", f"127.0.0.1:{origin}"),
        ("user-agent", "test"),
        ("connection", "close"),
    ]


@pytest.mark.parametrize(
    ("framing", "body"),
    [
        ("Content-Length: 11\r\n", b"hello world"),
        ("Transfer-Encoding: chunked\r\n", b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n"),
        ("Content-Length: 11\r\nExpect: 100-continue\r\n", b"hello world"),
    ],
)
async def test_a_request_body_is_forwarded_as_framed(
    sockdir: Path, origin: int, framing: str, body: bytes
) -> None:
    async with running(sockdir, [f"127.0.0.1:{origin}"]) as proxy:
        raw = await ask(
            proxy,
            f"POST http://127.0.0.1:{origin}/up HTTP/1.1\r\n{framing}\r\n".encode() + body,
        )
    if b"100 Continue" in raw:
        raw = raw.split(b"\r\n\r\n", 1)[1]
    status, _, said = answer(raw)
    assert status == 200
    assert json.loads(said)["body"] == "hello world"


# --- bad input and bounds -----------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"HELLO\r\n\r\n",
        b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
        b"GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n",
        b"GET https://example.com/ HTTP/1.1\r\n\r\n",
        b"GET http://user:pw@example.com/ HTTP/1.1\r\n\r\n",
        b"CONNECT example.com HTTP/1.1\r\n\r\n",
        b"CONNECT exa_mple..com:443 HTTP/1.1\r\n\r\n",
        b"CONNECT example.com:99999 HTTP/1.1\r\n\r\n",
        b"CONNECT example.com:443 HTTP/2.0\r\n\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\nNo colon here\r\n\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\nX: a\x00b\r\n\r\n",
        b"POST http://example.com/ HTTP/1.1\r\nContent-Length: 1\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n",
        b"POST http://example.com/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"POST http://example.com/ HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: x",  # ends before its head does
    ],
)
async def test_malformed_input_is_answered_400_and_closed(sockdir: Path, raw: bytes) -> None:
    async with running(sockdir, ["example.com"]) as proxy:
        reader, writer = await asyncio.open_unix_connection(str(proxy.path))
        writer.write(raw)
        if raw.endswith(b"Host: x"):
            writer.write_eof()
        said = await asyncio.wait_for(reader.read(), 5)  # read() returns at the close
        writer.close()
        assert answer(said)[0] == 400, said
        assert proxy.refused == {}


async def test_an_oversize_head_is_answered_431(sockdir: Path) -> None:
    async with running(sockdir, ["example.com"]) as proxy:
        raw = b"CONNECT example.com:443 HTTP/1.1\r\n" + b"X-Pad: " + b"a" * 20_000 + b"\r\n\r\n"
        status, _, said = answer(await ask(proxy, raw))
        assert (status, said) == (431, "request head over 16384 bytes\n")
        many = b"CONNECT example.com:443 HTTP/1.1\r\n" + b"X: y\r\n" * 3000 + b"\r\n"
        assert answer(await ask(proxy, many))[0] == 431


async def test_a_slow_head_times_out(sockdir: Path) -> None:
    """A slowloris sending a byte at a time, and a client sending nothing, are both cut
    off at the head timeout."""
    async with running(sockdir, ["example.com"], head_timeout=0.5) as proxy:
        reader, writer = await asyncio.open_unix_connection(str(proxy.path))
        started = time.monotonic()
        answered = asyncio.create_task(reader.read())
        for byte in b"CONNECT example.com:443 HTTP/1.1\r\nX-Slow: aaaaaaaaaaaaaaaaaaa":
            if answered.done():
                break
            writer.write(bytes([byte]))
            await asyncio.sleep(0.05)
        said = await asyncio.wait_for(answered, 5)
        assert answer(said)[:3:2] == (408, "no request head within 0.5 s\n")
        assert 0.4 < time.monotonic() - started < 2.5
        writer.close()
        started = time.monotonic()
        assert answer(await ask(proxy, b""))[0] == 408
        assert time.monotonic() - started < 2.5


async def test_a_connect_that_hangs_times_out(sockdir: Path) -> None:
    """192.0.2.0/24 is for documentation: nothing answers there (502 where the box has
    no route at all)."""
    async with running(sockdir, ["192.0.2.0/24"], connect_timeout=0.5) as proxy:
        started = time.monotonic()
        status, said = await connect(proxy, "192.0.2.1:443")
        assert status in (502, 504), said
        assert time.monotonic() - started < 3


async def test_an_address_that_hangs_leaves_time_for_the_next(
    sockdir: Path, echo_port: int
) -> None:
    """A name's addresses are tried in order, each with its share of the time left, so
    one that drops packets does not use up the next one's (called with the addresses a
    name would give, since no name here resolves to two)."""
    async with running(sockdir, [], connect_timeout=1.0) as proxy:
        loop = asyncio.get_running_loop()
        started = loop.time()
        targets = [
            (socket.AF_INET, ("192.0.2.1", 443)),
            (socket.AF_INET, ("127.0.0.1", echo_port)),
        ]
        reader, writer = await proxy._dial._connect("two.example", 443, targets, started + 1.0)
        assert loop.time() - started < 0.9
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"ping"
        writer.close()


async def test_connections_past_the_limit_are_turned_away(sockdir: Path, echo_port: int) -> None:
    async with running(sockdir, [f"127.0.0.1:{echo_port}"], max_tunnels=2) as proxy:
        held = []
        for _ in range(2):
            reader, writer = await asyncio.open_unix_connection(str(proxy.path))
            writer.write(f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n\r\n".encode())
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")
            held.append(writer)
        assert await connect(proxy, f"127.0.0.1:{echo_port}") == (
            503,
            "over 2 connections through the proxy",
        )
        assert proxy.turned_away == 1
        held.pop().close()
        for _ in range(50):
            if proxy.open_connections < 2:
                break
            await asyncio.sleep(0.02)
        assert (await connect(proxy, f"127.0.0.1:{echo_port}"))[0] == 200
        held.pop().close()


async def test_aclose_ends_open_tunnels_and_removes_the_socket(
    sockdir: Path, echo_port: int
) -> None:
    proxy = AllowlistProxy(sockdir / "proxy.sock", [f"127.0.0.1:{echo_port}"])
    await proxy.start()
    assert stat.S_IMODE(os.stat(proxy.path).st_mode) == 0o600
    reader, writer = await asyncio.open_unix_connection(str(proxy.path))
    writer.write(f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n\r\n".encode())
    await reader.readuntil(b"\r\n\r\n")
    silent_reader, silent_writer = await asyncio.open_unix_connection(str(proxy.path))
    await asyncio.sleep(0.05)
    assert proxy.open_connections == 2
    await asyncio.wait_for(proxy.aclose(), 2)
    assert await asyncio.wait_for(reader.read(), 2) == b""
    assert await asyncio.wait_for(silent_reader.read(), 2) == b""
    assert proxy.open_connections == 0
    assert not proxy.path.exists()
    writer.close()
    silent_writer.close()


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("runuser") is None,
    reason="needs root with runuser, to connect as another Unix user",
)
async def test_another_user_cannot_use_the_proxy(sockdir: Path) -> None:
    os.chmod(sockdir, 0o755)
    async with running(sockdir, []) as proxy:
        child = await asyncio.create_subprocess_exec(
            "runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c",
            f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({str(proxy.path)!r})",
            stderr=subprocess.PIPE,
        )  # fmt: skip
        _, stderr = await child.communicate()
    assert child.returncode != 0
    assert b"PermissionError" in stderr


# --- the bridge on its own ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def bridge(sock: Path, port: int, *child: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *bridge_argv(PYTHON, str(sock), port), *child, stdin=subprocess.PIPE
    )


async def test_the_bridge_runs_its_child_and_passes_on_its_exit_status(sockdir: Path) -> None:
    """The child connects first thing (the bridge listens before it starts); with no
    proxy behind, the connection is closed and the bridge says so once."""
    port = free_port()
    script = (
        "import socket, sys\n"
        "for _ in range(2):\n"
        f"    s = socket.create_connection(('127.0.0.1', {port}))\n"
        "    assert s.recv(100) == b''\n"
        "sys.exit(3)\n"
    )
    child = await asyncio.create_subprocess_exec(
        *bridge_argv(PYTHON, str(sockdir / "none"), port), PYTHON, "-c", script,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    _, stderr = await asyncio.wait_for(child.communicate(), 10)
    assert child.returncode == 3
    assert stderr.decode().count("netbridge: cannot reach the proxy at ") == 1
    child = await bridge(sockdir / "none", free_port(), str(sockdir / "no-such-program"))
    assert await child.wait() == 127
    wrong = await asyncio.create_subprocess_exec(PYTHON, "-I", "-S", str(NETBRIDGE), "x", "80")
    assert await wrong.wait() == 125


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
async def test_the_bridge_passes_signals_on_to_its_child(sockdir: Path, sig: int) -> None:
    """The child says it is ready on stdout; the bridge exits 128 + the signal that
    ended it (the child keeps the default action for each)."""
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_DFL)\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    child = await asyncio.create_subprocess_exec(
        *bridge_argv(PYTHON, str(sockdir / "none"), free_port()), PYTHON, "-c", script,
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert child.stdout is not None
    assert await asyncio.wait_for(child.stdout.readline(), 10) == b"ready\n"
    child.send_signal(sig)
    assert await asyncio.wait_for(child.wait(), 10) == 128 + sig


# How the bridge and the proxy hold bytes on their way: in pipes, moved by os.splice (where
# the kernel lends pipes), or copied through Python: by a bridge under a Python without
# os.splice (3.9, a one-file binary's system python3), and by a proxy whose user is past
# pipe-user-pages-soft (splicing.pipe's None, as it says then, stands in for that here).
WAYS_OF_HOLDING = ["spliced", "bridge copies", "proxy copies"]


@pytest.mark.parametrize("held", WAYS_OF_HOLDING)
async def test_the_bridge_carries_a_large_transfer_both_ways(
    sockdir: Path, echo_port: int, held: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8 MiB up while 8 MiB comes back: the bridge's and the proxy's pipes or buffers fill
    and drain (neither reads more than it can pass on), and every byte arrives in order,
    the first of them sent with the CONNECT itself."""
    port = free_port()
    sent = os.urandom(1 << 20) * 8
    if held == "proxy copies":
        monkeypatch.setattr(splicing, "pipe", lambda: None)
    async with running(sockdir, [f"127.0.0.1:{echo_port}"]) as proxy:
        if held == "bridge copies":
            child = await bridge_without_splice(proxy.path, port)
        else:
            child = await bridge(proxy.path, port, PYTHON, "-c", "import sys; sys.stdin.read()")
        await wait_listening(port)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n\r\n".encode() + sent[:100])
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200 ")

        async def upload() -> None:
            for start in range(100, len(sent), 1 << 16):
                writer.write(sent[start : start + (1 << 16)])
                await writer.drain()
            writer.write_eof()

        uploading = asyncio.create_task(upload())
        back = await asyncio.wait_for(reader.read(), 30)
        await uploading
        writer.close()
        assert child.stdin is not None
        child.stdin.close()
        assert await asyncio.wait_for(child.wait(), 10) == 0
    assert len(back) == len(sent)
    assert back == sent


async def bridge_without_splice(sock: Path, port: int) -> asyncio.subprocess.Process:
    """The bridge as a Python without os.splice runs it."""
    argv = bridge_argv(PYTHON, str(sock), port)
    start = argv.index(str(NETBRIDGE))
    child = [PYTHON, "-c", "import sys; sys.stdin.read()"]
    script = (
        "import os, runpy, sys; del os.splice; "
        f"sys.argv = {[str(NETBRIDGE), *argv[start + 1 :], *child]!r}; "
        f"runpy.run_path({str(NETBRIDGE)!r}, run_name='__main__')"
    )
    return await asyncio.create_subprocess_exec(*argv[:start], "-c", script, stdin=subprocess.PIPE)


def fds_and_threads(pid: int) -> tuple[int, int]:
    threads = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("Threads:")
    )
    return len(os.listdir(f"/proc/{pid}/fd")), threads


async def test_the_bridge_leaks_no_descriptor_or_thread(sockdir: Path, echo_port: int) -> None:
    """A hundred connections through bridge and proxy (whole, half-closed, reset, refused)
    leave the bridge, and the proxy's process (this one), as they found them: every pipe
    and socket copy closed."""
    port = free_port()
    async with running(sockdir, [f"127.0.0.1:{echo_port}"]) as proxy:
        child = await bridge(proxy.path, port, PYTHON, "-c", "import sys; sys.stdin.read()")
        await wait_listening(port)
        before = await settled(child.pid, proxy)
        ours = len(os.listdir("/proc/self/fd"))
        for n in range(100):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            target = f"127.0.0.1:{echo_port}" if n % 4 else "evil.example:443"
            writer.write(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            if head.startswith(b"HTTP/1.1 200 "):
                writer.write(b"ping")
                assert await reader.readexactly(4) == b"ping"
                if n % 4 == 1:  # a reset, not a close
                    sock = writer.get_extra_info("socket")
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
                elif n % 4 == 2:
                    writer.write_eof()
                    assert await reader.read() == b""
            writer.close()
        assert await settled(child.pid, proxy) == before
        assert len(os.listdir("/proc/self/fd")) == ours
        assert child.stdin is not None
        child.stdin.close()
        assert await asyncio.wait_for(child.wait(), 10) == 0


async def settled(pid: int, proxy: AllowlistProxy) -> tuple[int, int]:
    """The bridge's descriptors and threads once no connection is open and they hold
    still for a moment."""
    last = None
    for _ in range(100):
        now = fds_and_threads(pid)
        if now == last and proxy.open_connections == 0:
            return now
        last = now
        await asyncio.sleep(0.1)
    raise AssertionError(f"the bridge never settled: {last}")


async def wait_listening(port: int) -> None:
    for _ in range(200):
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.02)
            continue
        writer.close()
        return
    raise AssertionError(f"nothing listens on {port}")


# --- the whole way: bubblewrap, bridge, proxy -----------------------------------------------

INSIDE = """
import json, socket, sys, urllib.error, urllib.request
said = {}
# First, before anything else: the bridge listens before its child starts.
s = socket.create_connection(("127.0.0.1", BRIDGE_PORT), timeout=5)
s.sendall(b"CONNECT 127.0.0.1:ECHO_PORT HTTP/1.1\\r\\n\\r\\n")
head = b""
while not head.endswith(b"\\r\\n\\r\\n"):
    head += s.recv(1)
said["connect"] = head.decode()
s.sendall(b"ping" * 1000)
s.shutdown(socket.SHUT_WR)
back = b""
while data := s.recv(65536):
    back += data
said["echo"] = back == b"ping" * 1000
try:
    s6 = socket.create_connection(("::1", BRIDGE_PORT), timeout=5)
    s6.sendall(b"CONNECT 127.0.0.1:ECHO_PORT HTTP/1.1\\r\\n\\r\\n")
    said["v6"] = s6.recv(100).decode()
except OSError as exc:
    said["v6"] = "no IPv6 loopback: " + str(exc)
try:
    socket.create_connection(("127.0.0.1", ORIGIN_PORT), timeout=5)
    said["direct"] = "connected"
except OSError as exc:
    said["direct"] = type(exc).__name__
with urllib.request.urlopen("http://127.0.0.1:ORIGIN_PORT/through") as answer:
    said["http"] = json.load(answer)["line"]
try:
    urllib.request.urlopen("http://evil.example/")
except urllib.error.HTTPError as exc:
    said["http_refused"] = [exc.code, exc.read().decode()]
try:
    urllib.request.urlopen("https://evil.example/")
except OSError as exc:
    said["https_refused"] = str(exc)
print(json.dumps(said))
sys.exit(7)
"""


def fence(sockdir: Path, bridge_prefix: list[str], python: str, script: str) -> list[str]:
    return [
        str(BWRAP), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
        "--unshare-net", "--unshare-pid", "--bind", str(sockdir), str(sockdir),
        "--die-with-parent", *bridge_prefix, python, "-I", "-c", script,
    ]  # fmt: skip


def inside(echo_port: int, origin: int) -> str:
    return (
        INSIDE.replace("BRIDGE_PORT", str(BRIDGE_PORT))
        .replace("ECHO_PORT", str(echo_port))
        .replace("ORIGIN_PORT", str(origin))
    )


@needs_bwrap
async def test_through_bubblewrap_the_proxy_is_the_only_way_out(
    sockdir: Path, echo_port: int, origin: int
) -> None:
    allow = [f"127.0.0.1:{echo_port}", f"127.0.0.1:{origin}"]
    async with running(sockdir, allow) as proxy:
        prefix = bridge_argv(PYTHON, str(proxy.path), BRIDGE_PORT)
        child = await asyncio.create_subprocess_exec(
            *fence(sockdir, prefix, PYTHON, inside(echo_port, origin)),
            env=os.environ | proxy_env(BRIDGE_PORT),
            stdout=subprocess.PIPE,
        )
        stdout, _ = await asyncio.wait_for(child.communicate(), 30)
        assert proxy.refused == {"evil.example": 2}
    assert child.returncode == 7  # the agent's own status, through bridge and bwrap
    said = json.loads(stdout)
    assert said["connect"] == "HTTP/1.1 200 Connection established\r\n\r\n"
    assert said["echo"] is True
    if not said["v6"].startswith("no IPv6"):
        assert said["v6"] == "HTTP/1.1 200 Connection established\r\n\r\n"
    assert said["direct"] == "ConnectionRefusedError"  # its loopback is its own
    assert said["http"] == "GET /through HTTP/1.1"
    assert said["http_refused"] == [403, NOT_NAMED + "\n"]
    assert "Tunnel connection failed: 403" in said["https_refused"]


@needs_bwrap
@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("runuser") is None,
    reason="needs root with runuser, to run the sandbox as nobody",
)
async def test_through_bubblewrap_as_nobody(sockdir: Path, echo_port: int, origin: int) -> None:
    """An unprivileged sandbox (a user namespace): the system's python3, and the bridge
    copied where nobody can read it (the venv's python and the checkout live under
    /root). The socket is nobody's, as it would be the sandbox user's."""
    os.chmod(sockdir, 0o755)
    script = sockdir / "netbridge.py"
    shutil.copyfile(NETBRIDGE, script)
    os.chmod(script, 0o755)
    allow = [f"127.0.0.1:{echo_port}", f"127.0.0.1:{origin}"]
    async with running(sockdir, allow) as proxy:
        nobody = pwd.getpwnam("nobody")
        os.chown(proxy.path, nobody.pw_uid, nobody.pw_gid)
        prefix = bridge_argv("/usr/bin/python3", str(proxy.path), BRIDGE_PORT)
        prefix[3] = str(script)
        argv = fence(sockdir, prefix, "/usr/bin/python3", inside(echo_port, origin))
        env = {"PATH": "/usr/bin:/bin", "HOME": "/"} | proxy_env(BRIDGE_PORT)
        child = await asyncio.create_subprocess_exec(
            "runuser", "-u", "nobody", "--", "env", "-i",
            *(f"{key}={value}" for key, value in env.items()), *argv,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/",
        )  # fmt: skip
        stdout, stderr = await asyncio.wait_for(child.communicate(), 30)
    if child.returncode != 7 and b"bwrap:" in stderr:
        pytest.skip(f"bwrap cannot make a sandbox as nobody here: {stderr.decode().strip()}")
    assert child.returncode == 7, stderr.decode()
    said = json.loads(stdout)
    assert said["echo"] is True
    assert said["direct"] == "ConnectionRefusedError"
    assert said["http"] == "GET /through HTTP/1.1"
    assert said["http_refused"][0] == 403


def test_the_bridge_imports_the_standard_library_only() -> None:
    """It runs inside the sandbox under `python3 -I -S`: no tailagent, no site-packages."""
    tree = ast.parse(NETBRIDGE.read_text())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    imported |= {node.module for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}  # fmt: skip
    assert (
        sorted(name for name in imported if name.split(".")[0] not in sys.stdlib_module_names) == []
    )
