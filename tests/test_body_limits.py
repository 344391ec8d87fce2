"""Nothing heavy happens before the caller is known: the attacks of issue 31 (part 4),
each through a real server over raw sockets, as an attacker would send them.

A body is read only once the caller is let in, within a deadline; its shape (nesting,
parts, values) is checked before a2a-sdk's pure-Python parsing, which costs time in
proportion to it, on the one event loop every caller shares.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import RunningServer, start_server

MiB = 1 << 20
JSON_HEADERS = {"A2A-Version": "1.0", "Content-Type": "application/json"}
BODY_TIMEOUT = 2.0
CONFIG = f"body_timeout = {BODY_TIMEOUT}\n"


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("body-limits")
    (tmp / "tailagent.toml").write_text(CONFIG)
    server = start_server(
        tmp, "--config", str(tmp / "tailagent.toml"), "--tailscale-socket", str(tmp / "none.sock")
    )
    yield server
    server.stop()


def address(server: RunningServer) -> tuple[str, int]:
    parts = urlsplit(server.url)
    return parts.hostname or "127.0.0.1", parts.port or 0


def head(length: int, token: str | None = None, path: str = "/") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"A2A-Version: 1.0\r\n{auth}Content-Length: {length}\r\n\r\n"
    ).encode()


def status_of(sock: socket.socket) -> int:
    """The status of the answer on `sock`, read even after the server stopped reading."""
    line = sock.makefile("rb").readline()
    return int(line.split()[1]) if line else 0


def memory(server: RunningServer) -> dict[str, int]:
    """The server's VmRSS and VmHWM, in MiB."""
    text = Path(f"/proc/{server.process.pid}/status").read_text()
    rows = dict(line.split(":", 1) for line in text.splitlines() if line.startswith("Vm"))
    return {k: int(rows[k].split()[0]) // 1024 for k in ("VmRSS", "VmHWM")}


def send_big(server: RunningServer, statuses: list[int]) -> None:
    with socket.create_connection(address(server), timeout=30) as sock:
        sock.sendall(head(60 * MiB))
        chunk = b"x" * MiB
        try:
            for _ in range(60):
                sock.sendall(chunk)
        except OSError:
            pass  # the server has answered and stopped reading: the answer is still there
        statuses.append(status_of(sock))


def test_large_bodies_without_credentials_are_never_read(local: RunningServer) -> None:
    before = memory(local)
    statuses: list[int] = []
    senders = [threading.Thread(target=send_big, args=(local, statuses)) for _ in range(8)]
    started = time.monotonic()
    for sender in senders:
        sender.start()
    for sender in senders:
        sender.join(60)
    took = time.monotonic() - started
    grown = memory(local)["VmHWM"] - before["VmHWM"]
    assert statuses == [401] * 8
    assert grown < 32, f"8 x 60 MiB without credentials: peak memory +{grown} MiB"
    assert took < 5


def test_bodies_that_drip_are_cut(local: RunningServer) -> None:
    # Without credentials: answered at once, nothing of the body awaited.
    strangers = [socket.create_connection(address(local), timeout=10) for _ in range(50)]
    started = time.monotonic()
    for sock in strangers:
        sock.sendall(head(1000) + b"{")
    assert [status_of(sock) for sock in strangers] == [401] * 50
    assert time.monotonic() - started < 3
    for sock in strangers:
        sock.close()
    # With credentials: cut at the deadline, however steadily the bytes come.
    with socket.create_connection(address(local), timeout=10) as sock:
        sock.sendall(head(1000, local.token) + b"{")
        started = time.monotonic()
        answered: list[int] = []
        reader = threading.Thread(target=lambda: answered.append(status_of(sock)))
        reader.start()
        while reader.is_alive() and time.monotonic() - started < 8:
            try:
                sock.sendall(b" ")
            except OSError:
                break
            reader.join(0.5)
        reader.join(2)
        assert answered == [408]
        assert BODY_TIMEOUT <= time.monotonic() - started < BODY_TIMEOUT + 2
    assert "408" in local.last_access_line()


def test_headers_that_drip_are_cut(local: RunningServer) -> None:
    with socket.create_connection(address(local), timeout=10) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started = time.monotonic()
        with pytest.raises(OSError):
            while time.monotonic() - started < 15:
                sock.sendall(b"X-Drip: 1\r\n")
                if sock.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK) == b"":
                    raise ConnectionResetError("closed by the server")
                time.sleep(0.5)
        assert time.monotonic() - started < 8  # Hypercorn's 5 s for a request to arrive


def post(server: RunningServer, body: bytes, path: str = "/", token: bool = True) -> httpx.Response:
    headers = {"Content-Type": "application/json", "A2A-Version": "1.0"}
    if token:
        headers["Authorization"] = f"Bearer {server.token}"
    return httpx.post(server.url + path, content=body, headers=headers, timeout=60)


def message(parts: list[Any], **extra: Any) -> dict[str, Any]:
    return {"messageId": f"m-{time.monotonic_ns()}", "role": "ROLE_USER", "parts": parts, **extra}


def rpc(msg: dict[str, Any]) -> bytes:
    params = {"message": msg}
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    ).encode()


def nested(depth: int) -> Any:
    value: Any = 1
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def test_a_deeply_nested_body_gets_a_clear_400(local: RunningServer) -> None:
    deep = b"[" * 20000 + b"]" * 20000
    assert post(local, deep, token=False).status_code == 401  # never parsed
    refused = post(local, deep)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == -32600
    assert "nested" in refused.json()["error"]["message"]
    # Deep enough that a2a-sdk's protobuf types could not hold it (an internal error).
    data = post(local, rpc(message([{"data": nested(40)}])))
    assert data.status_code == 400 and "nested" in data.json()["error"]["message"]
    rest = post(local, json.dumps({"message": message([{"data": nested(400)}])}).encode(),
                path="/message:send")  # fmt: skip
    assert rest.status_code == 400
    assert rest.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "nested" in rest.json()["error"]["message"]
    fine = post(local, rpc(message([{"data": nested(20)}])))
    assert fine.status_code == 200 and "result" in fine.json()


def healthz_while(server: RunningServer, work: Any) -> tuple[Any, float]:
    """What `work()` returned, and the longest /healthz took while it ran."""
    took: list[float] = []
    done = threading.Event()

    def probe() -> None:
        with httpx.Client(timeout=30) as client:
            while not done.is_set():
                started = time.monotonic()
                client.get(f"{server.url}/healthz")
                took.append(time.monotonic() - started)
                time.sleep(0.02)

    prober = threading.Thread(target=probe)
    prober.start()
    time.sleep(0.2)
    try:
        result = work()
    finally:
        time.sleep(0.2)
        done.set()
        prober.join(60)
    return result, max(took)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(lambda: rpc(message([{"text": "a"}] * 200_000)), id="200k-parts"),
        pytest.param(lambda: rpc(message([{"data": list(range(200_000))}])), id="200k-values"),
        pytest.param(
            lambda: rpc(message([{"text": "a"}], metadata={str(i): i for i in range(200_000)})),
            id="200k-metadata",
        ),
    ],
)
def test_a_huge_message_is_refused_fast_while_others_are_served(
    local: RunningServer, body: Any
) -> None:
    raw = body()
    assert len(raw) < 4 * MiB  # within the body limit: only its shape is too much
    started = time.monotonic()
    refused, slowest = healthz_while(local, lambda: post(local, raw))
    assert refused.status_code == 400, refused.text[:300]
    assert refused.json()["error"]["code"] == -32600
    assert time.monotonic() - started < 3
    assert slowest < 0.5, f"/healthz took {slowest:.2f} s meanwhile"


def test_a_refusal_before_the_body_says_the_connection_closes(local: RunningServer) -> None:
    """The server ends a connection whose refused body it never took; its answer says
    so, or a client keeping the connection alive sends its next request into the close
    ("Server disconnected without sending a response", once in a suite run)."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage"}).encode()
    with socket.create_connection(address(local), timeout=10) as sock:
        sock.sendall(head(len(body)))  # no token: refused before the body is read
        time.sleep(0.2)  # the body comes after the answer, as it can on a busy box
        sock.sendall(body)
        answer = sock.makefile("rb").read()  # to the server's close
    status, _, rest = answer.partition(b"\r\n")
    assert status.startswith(b"HTTP/1.1 401"), answer[:200]
    assert b"\r\nconnection: close\r\n" in rest.lower(), answer[:400]
    with httpx.Client(base_url=local.url) as client:  # keeps connections alive
        for _ in range(3):
            sent = client.post("/", content=body, headers=JSON_HEADERS)
            assert sent.status_code == 401
        assert client.get("/healthz").status_code == 200
