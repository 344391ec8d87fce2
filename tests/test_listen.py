"""The listener: a unix socket that only its owner can use, and loopback TCP on IPv6."""

from __future__ import annotations

import stat
from pathlib import Path

import httpx

from tests.conftest import start_server

V1 = {"A2A-Version": "1.0", "Content-Type": "application/json"}
SEND = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "SendMessage",
    "params": {"message": {"messageId": "u1", "role": "ROLE_USER", "parts": [{"text": "unix"}]}},
}


def test_unix_socket_listener(tmp_path: Path) -> None:
    socket_path = tmp_path / "run" / "tailagent.sock"
    server = start_server(tmp_path, listen=f"unix:{socket_path}")
    try:
        mode = socket_path.stat().st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o600
        assert stat.S_IMODE(socket_path.parent.stat().st_mode) == 0o700
        transport = httpx.HTTPTransport(uds=str(socket_path))
        auth = {**V1, "Authorization": f"Bearer {server.token}"}
        with httpx.Client(transport=transport, base_url="http://localhost") as http:
            card = http.get("/.well-known/agent-card.json", headers=V1).json()
            assert card["supportedInterfaces"][0]["url"] == "http://localhost"
            result = http.post("/", json=SEND, headers=auth).json()["result"]
            assert result["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        assert server.stop() == 0
    assert not socket_path.exists()


def test_ipv6_loopback_listener(tmp_path: Path) -> None:
    server = start_server(tmp_path, listen="[::1]:0")
    try:
        assert server.url.startswith("http://[::1]:")
        auth = {**V1, "Authorization": f"Bearer {server.token}"}
        response = httpx.post(server.url, json=SEND, headers=auth)
        assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        assert server.stop() == 0
