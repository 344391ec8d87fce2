"""One request, one log line, and nothing in it an operator's terminal acts on.

Through a real server: an anonymous request whose path carries a whole forged
access line (`%0a` then a timestamp, `user:owner@… -> 200 allowed`) and an ESC; a
JSON-RPC request whose method and task id carry newlines, ESC and Unicode line
separators; an Origin header with a C1 byte. The server's own stderr is read as an
operator's `tail -f` or a log shipper would: line by line.
"""

from __future__ import annotations

import http.client
import io
import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tailagent.output.logs import LineFormatter
from tests.conftest import RunningServer, start_server

FORGED = "2026-12-02 12:00:00,000 INFO tailagent.access: user:owner@example.com POST / CancelTask"
# Each line of the text format starts so; a traceback's lines start with "  | ".
RECORD = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ [\w.]+: ")
ACTING = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
SEPARATORS = "\u2028\u0085\u2029"  # lines to str.splitlines, and to many log readers


def send(server: RunningServer, method: str, path: str, body: bytes = b"", **headers: str) -> int:
    """One raw HTTP request: the path and headers exactly as given, byte for byte."""
    url = urlsplit(server.url)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
    connection.putrequest(method, path, skip_accept_encoding=True)
    for name, value in {"Content-Length": str(len(body)), **headers}.items():
        connection.putheader(name, value.encode("latin-1"))
    connection.endheaders(body)
    status = connection.getresponse().status
    connection.close()
    return status


def rpc(method: str, task_id: str) -> bytes:
    body = {"jsonrpc": "2.0", "id": "1", "method": method, "params": {"id": task_id}}
    return json.dumps(body).encode()


def access_lines(server: RunningServer, since: int) -> list[str]:
    server.last_access_line()  # waits for the line of the latest request
    return [line for line in server.log()[since:].split("\n") if "tailagent.access:" in line]


@pytest.fixture(scope="module")
def text_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = start_server(tmp_path_factory.mktemp("text-log"), "--log-format", "text")
    yield server
    server.stop()


def test_a_forged_line_in_the_path_stays_in_its_own_line(text_server: RunningServer) -> None:
    start = len(text_server.log())
    path = "/nope%0a" + FORGED.replace(" ", "%20") + "%20-%3E%20200%20allowed%1b[2J"
    assert send(text_server, "GET", path) == 401
    [line] = access_lines(text_server, start)
    assert RECORD.match(line), line
    assert f" GET {path} -> 401 refused: " in line  # as sent: no space, no newline
    log = text_server.log()[start:]
    assert all(RECORD.match(line) for line in log.splitlines()), log
    assert not ACTING.findall(log.replace("\n", "")), log


def test_a_method_and_task_id_are_one_field_of_one_line(text_server: RunningServer) -> None:
    start = len(text_server.log())
    method = "GetTask\n" + FORGED + " -> 200 allowed\x1b]0;owned\x07"
    task_id = f"t\x1b[2J\n{FORGED}{SEPARATORS}"
    auth = {"Authorization": f"Bearer {text_server.token}", "Content-Type": "application/json"}
    assert send(text_server, "POST", "/", rpc(method, task_id), **auth) == 200
    assert send(text_server, "POST", "/", rpc("GetTask", "t -> 200 allowed"), **auth) == 200
    odd, spaced = access_lines(text_server, start)
    # Each field quoted (JSON, so its controls are escapes), the request's outcome last.
    assert r' POST / "GetTask\n2026-12-02 12:00:00,000 INFO tailagent.access: ' in odd, odd
    assert r'task="t\u001b[2J\n2026-12-02' in odd and odd.endswith(" -> 200 allowed"), odd
    assert ' POST / GetTask task="t -> 200 allowed" -> 200 allowed' in spaced, spaced
    log = text_server.log()[start:]
    assert len(log.splitlines()) == log.count("\n"), "a separator split a line"
    assert all(RECORD.match(line) for line in log.splitlines()), log
    assert not ACTING.findall(log.replace("\n", "")), log


def test_a_header_with_a_c1_byte_is_shown_escaped(text_server: RunningServer) -> None:
    start = len(text_server.log())
    origin = "http://evil.example\x9b2J"  # h11 lets bytes 0x80-0xff through (obs-text)
    assert send(text_server, "POST", "/", rpc("GetTask", "t"), Origin=origin) == 403
    [line] = access_lines(text_server, start)
    assert r"refused: Origin http://evil.example\x9b2J is not in" in line, line
    assert not ACTING.findall(line), line


def test_json_lines_escape_what_splits_a_line(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--log-format", "json")
    try:
        method = f"GetTask{SEPARATORS}\x1b[2J\u202egnp.exe"
        auth = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
        assert send(server, "POST", "/", rpc(method, "t\nx"), **auth) == 200
        deadline = time.monotonic() + 5
        while '"tailagent.access"' not in server.log() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        server.stop()
    log = server.log()
    assert not ACTING.findall(log.replace("\n", "")), log
    assert log.splitlines() == log.rstrip("\n").split("\n")
    entries = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    logged = [e["message"] for e in entries if e["logger"] == "tailagent.access"]
    assert any(json.dumps(method) in message for message in logged), logged  # one field
    for raw in ("\\u2028", "\\u0085", "\\u2029", "\\u202e"):
        assert raw in log


def test_a_traceback_is_readable_and_cannot_start_a_record() -> None:
    """An exception's text is the caller's too (a message quoting a request)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(LineFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log = logging.getLogger("tailagent.test_traceback")
    log.addHandler(handler)
    log.propagate = False
    try:
        raise ValueError(f"no such task\n{FORGED} -> 200 allowed\x1b[2J")
    except ValueError:
        log.exception("failed on %s", "GET /x\nforged")
    finally:
        log.removeHandler(handler)
    first, *rest = stream.getvalue().rstrip("\n").split("\n")
    assert RECORD.match(first) and first.endswith(r"failed on GET /x\nforged"), first
    assert rest[0] == "  | Traceback (most recent call last):"
    assert rest[-1] == rf"  | {FORGED} -> 200 allowed\x1b[2J", rest
    assert rest[-2] == "  | ValueError: no such task"
    assert all(line.startswith("  | ") for line in rest)
