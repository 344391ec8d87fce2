"""The listener: a unix socket that only its owner can use, and loopback TCP on IPv6."""

from __future__ import annotations

import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx

V1 = {"A2A-Version": "1.0", "Content-Type": "application/json"}
SEND = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "SendMessage",
    "params": {"message": {"messageId": "u1", "role": "ROLE_USER", "parts": [{"text": "unix"}]}},
}


def auth(tmp_path: Path) -> dict[str, str]:
    token = (tmp_path / "state" / "local-token").read_text().strip()
    return {**V1, "Authorization": f"Bearer {token}"}


def test_unix_socket_listener(tmp_path: Path) -> None:
    socket_path = tmp_path / "run" / "tailagent.sock"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tailagent",
            "serve",
            "--agent",
            "echo",
            "--listen",
            f"unix:{socket_path}",
            "--state-dir",
            str(tmp_path / "state"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(200):
            if socket_path.exists():
                break
            time.sleep(0.05)
        mode = socket_path.stat().st_mode
        assert stat.S_ISSOCK(mode)
        assert stat.S_IMODE(mode) == 0o600
        assert stat.S_IMODE(socket_path.parent.stat().st_mode) == 0o700
        transport = httpx.HTTPTransport(uds=str(socket_path))
        with httpx.Client(transport=transport, base_url="http://localhost") as http:
            card = http.get("/.well-known/agent-card.json", headers=V1).json()
            assert card["supportedInterfaces"][0]["url"] == "http://localhost"
            result = http.post("/", json=SEND, headers=auth(tmp_path)).json()["result"]
            assert result["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        process.terminate()
        process.wait(timeout=15)
    assert not socket_path.exists()


def test_ipv6_loopback_listener(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tailagent",
            "serve",
            "--agent",
            "echo",
            "--listen",
            "[::1]:0",
            "--state-dir",
            str(tmp_path / "state"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        url = ""
        for line in process.stderr:
            if "serving on " in line:
                url = line.split("serving on ")[1].split()[0]
                break
        assert url.startswith("http://[::1]:")
        response = httpx.post(url, json=SEND, headers=auth(tmp_path))
        assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        process.terminate()
        process.wait(timeout=15)
