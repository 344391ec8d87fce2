"""Hypercorn as the server runs it: a connection its client closed is let go at once;
a streamed response goes out head first."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any
from urllib.parse import urlsplit

from hypercorn.asyncio import serve

from bench.bench_core import rpc
from tailagent.listening.serving import hypercorn_config
from tests.conftest import RunningServer
from tests.processes import open_sockets

# Hypercorn's keep-alive timeout, which used to keep such a connection open.
KEEP_ALIVE = 5.0


def test_a_connection_the_client_closed_is_closed_at_once(server: RunningServer) -> None:
    url = urlsplit(server.url)
    pid = server.process.pid
    before = open_sockets(pid)
    body = json.dumps(rpc("SendMessage", "hello")).encode()
    head = (
        f"POST / HTTP/1.1\r\nHost: {url.netloc}\r\nA2A-Version: 1.0\r\n"
        f"Authorization: Bearer {server.token}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection((url.hostname, url.port), timeout=10) as conn:
        conn.sendall(head.encode() + body)
        reply = b""
        while b'"kind":"completed"' not in reply:
            chunk = conn.recv(65536)
            assert chunk, reply
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 200"), reply[:100]
        assert b"connection: close" not in reply.lower()  # kept alive for another request
        assert open_sockets(pid) == before + 1
    deadline = time.monotonic() + KEEP_ALIVE / 2
    while open_sockets(pid) > before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert open_sockets(pid) == before, "the server kept the connection its client closed"


class HeldBody:
    """An ASGI app that streams: it sends its head, then waits to be told to send its
    body."""

    def __init__(self) -> None:
        self.release = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await self.release.wait()
        await send({"type": "http.response.body", "body": b"the body"})


async def head_and_body(path: str) -> tuple[bytes, bytes]:
    """What a client reads before the app sends its body, and in its first read after."""
    app = HeldBody()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    stop = asyncio.Event()
    served = asyncio.ensure_future(
        serve(app, hypercorn_config(sock), shutdown_trigger=stop.wait)  # type: ignore[arg-type]
    )
    try:
        reader, writer = await asyncio.open_connection(*sock.getsockname())
        writer.write(f"GET {path} HTTP/1.1\r\nHost: here\r\n\r\n".encode())
        try:
            early = await asyncio.wait_for(reader.read(65536), 0.5)
        except TimeoutError:
            early = b""
        app.release.set()
        late = await asyncio.wait_for(reader.read(65536), 10)
        writer.close()
        return early, late
    finally:
        stop.set()
        await served
        sock.close()


async def test_a_streamed_response_sends_its_head_at_once() -> None:
    early, late = await head_and_body("/streamed")
    assert early.startswith(b"HTTP/1.1 200") and b"text/event-stream" in early
    assert b"the body" in late
