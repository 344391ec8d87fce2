"""What a server holds at rest, on the default SQLite store: the A2A path, and not
what only some requests need. SQLAlchemy loads for the request that needs a2a-sdk's
own store (a ListTasks), Quart and Jinja for the first page of the desk; the card's
private key and the libraries that sign with it never load (a child process signs), nor
do Web Push's (http-ece, py-vapid) before a page asks for the push key or a push is sent."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import httpx

from bench.bench_core import rpc
from tests.conftest import RunningServer, start_server
from tests.warm_start import cli_run

# Each package by a compiled module of its own, mapped as soon as it is imported
# (Quart and Jinja are pure Python: markupsafe's speedups come with them).
SQLALCHEMY = "sqlalchemy"
PAGE = "markupsafe"
SIGNING = "cryptography"


def loaded(pid: int) -> set[str]:
    """Which of those packages the running process has mapped, read from /proc."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return {p for p in (SQLALCHEMY, PAGE, SIGNING) if f"/site-packages/{p}/" in maps}


def call(method: str, params: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def signin_link(server: RunningServer) -> str:
    done = cli_run(
        [sys.executable, "-m", "tailagent", "web", "--state-dir", str(server.state_dir)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    found = re.search(r"http://\S+/desk/signin\?ticket=\S+", done.stdout)
    assert found is not None, done.stdout + done.stderr
    return found.group(0)


def test_what_loads_is_what_a_request_needs(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        pid = server.process.pid
        # uvloop is imported only to run the server's loop (cli._serve).
        assert "/site-packages/uvloop/" in Path(f"/proc/{pid}/maps").read_text()
        headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {server.token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
            card = http.get("/.well-known/agent-card.json").json()
            assert card["signatures"][0]["protected"]  # signed, by the child
            sent = http.post("/", json=rpc("SendMessage", "hello")).json()["result"]["task"]
            assert sent["status"]["state"] == "TASK_STATE_COMPLETED"
            got = http.post("/", json=call("GetTask", {"id": sent["id"]})).json()["result"]
            assert got["id"] == sent["id"]
            assert loaded(pid) == set(), "a card, a send and a read loaded more"
            listed = http.post("/", json=call("ListTasks", {})).json()["result"]
            assert [task["id"] for task in listed["tasks"]] == [sent["id"]]
            assert loaded(pid) == {SQLALCHEMY}
        with httpx.Client(base_url=server.url, timeout=30) as browser:
            assert browser.get(signin_link(server)).status_code == 303
            page = browser.get("/desk/")
            assert page.status_code == 200 and "hello" in page.text
        assert loaded(pid) == {SQLALCHEMY, PAGE}
    finally:
        assert server.stop() == 0, server.log()
