"""Hypercorn as the server runs it: a connection its client closed is let go at once."""

from __future__ import annotations

import json
import socket
import time
from urllib.parse import urlsplit

from bench.bench_core import rpc
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
