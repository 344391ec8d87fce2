"""What a server on the default SQLite store holds at rest: not SQLAlchemy, which it
loads only for the request that needs a2a-sdk's own store (a ListTasks)."""

from __future__ import annotations

from pathlib import Path

import httpx

from bench.bench_core import rpc
from tests.conftest import start_server


def loaded(pid: int, package: str) -> bool:
    """Whether the process has mapped a compiled module of the package (SQLAlchemy's
    are Cython extensions, mapped as soon as it is imported)."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return f"/site-packages/{package}/" in maps


def call(method: str, params: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def test_sqlalchemy_is_loaded_only_for_a_list(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        pid = server.process.pid
        headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {server.token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
            sent = http.post("/", json=rpc("SendMessage", "hello")).json()["result"]["task"]
            assert sent["status"]["state"] == "TASK_STATE_COMPLETED"
            got = http.post("/", json=call("GetTask", {"id": sent["id"]})).json()["result"]
            assert got["id"] == sent["id"]
            assert not loaded(pid, "sqlalchemy"), "a send and a read loaded SQLAlchemy"
            listed = http.post("/", json=call("ListTasks", {})).json()["result"]
            assert [task["id"] for task in listed["tasks"]] == [sent["id"]]
            assert loaded(pid, "sqlalchemy")
    finally:
        assert server.stop() == 0, server.log()
