"""Test helpers for the access layer: a fake tailscaled and raw requests from
chosen sources (a chosen source port, another Unix user, a unix socket)."""

from __future__ import annotations

import http.client
import json
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OWNER = "owner@example.com"
NODE_DNS = "devbox.tail1234.ts.net"
HERE = Path(__file__).parent


def whois(
    login: str = "",
    *,
    tags: tuple[str, ...] = (),
    caps: dict[str, Any] | None = None,
    name: str = "laptop",
    ip: str = "100.64.0.2",
) -> dict[str, Any]:
    """A whois answer as tailscaled shapes it; a tagged node gets the pseudo-profile."""
    profile = {
        "ID": 2,
        "LoginName": "tagged-devices" if tags else login,
        "DisplayName": "Tagged Devices" if tags else login.split("@")[0].title(),
    }
    node = {"ID": 7, "Name": f"{name}.tail1234.ts.net.", "Addresses": [f"{ip}/32"]}
    if tags:
        node["Tags"] = list(tags)
    return {"Node": node, "UserProfile": profile, "CapMap": caps or {}}


def status() -> dict[str, Any]:
    return {
        "Version": "1.102.5",
        "BackendState": "Running",
        "Self": {
            "UserID": 1,
            "DNSName": NODE_DNS + ".",
            "TailscaleIPs": ["100.64.0.1", "fd7a:115c:a1e0::1"],
        },
        "User": {"1": {"ID": 1, "LoginName": OWNER, "DisplayName": "Owner"}},
    }


@dataclass
class FakeTailscaled:
    directory: Path
    process: subprocess.Popen[str] | None = None
    peers: dict[str, Any] = field(default_factory=dict)
    nodes: dict[str, Any] = field(default_factory=dict)  # status "Peer", by node key
    down: bool = False
    serve: dict[str, Any] = field(default_factory=dict)
    operator: bool = True
    conflict_once: bool = False
    tun: bool = False  # tailscaled on the kernel's TUN device, not userspace networking

    @property
    def socket(self) -> Path:
        return self.directory / "tailscaled.sock"

    @property
    def config(self) -> Path:
        return self.directory / "fake.json"

    def write(self) -> None:
        state = {
            "whois": self.peers,
            "status": {**status(), "Peer": self.nodes, "TUN": self.tun},
            "down": self.down,
            "serve": self.serve,
            "operator": self.operator,
            "conflict_once": self.conflict_once,
        }
        temp = self.config.with_suffix(".tmp")
        temp.write_text(json.dumps(state))
        temp.replace(self.config)

    def start(self) -> FakeTailscaled:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.write()
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "fake_tailscaled.py"), str(self.socket), str(self.config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "ready"
        return self

    def current_serve(self) -> dict[str, Any]:
        """The serve config as the last write left it."""
        served: dict[str, Any] = json.loads(self.config.read_text()).get("serve", {})
        return served

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.socket.unlink(missing_ok=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def request(
    url_host: str,
    port: int,
    *,
    method: str = "POST",
    path: str = "/",
    body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    source_port: int = 0,
) -> tuple[int, dict[str, Any]]:
    """One HTTP request over TCP, optionally from a chosen source port."""
    conn = http.client.HTTPConnection(
        url_host, port, timeout=10, source_address=("127.0.0.1", source_port)
    )
    payload = json.dumps(body).encode() if body is not None else None
    all_headers = {"Content-Type": "application/json", "A2A-Version": "1.0", **(headers or {})}
    conn.request(method, path, body=payload, headers=all_headers)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, json.loads(data) if data else {}


def send_message(text: str = "hello") -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {"messageId": f"m-{text}", "role": "ROLE_USER", "parts": [{"text": text}]}
        },
    }


def curl_as_nobody(
    url: str, *, headers: dict[str, str], body: dict[str, Any], unix_socket: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """A request sent by a process of another Unix user (tests run as root)."""
    args = [
        "runuser",
        "-u",
        "nobody",
        "--",
        "curl",
        "-s",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-X",
        "POST",
        url,
        "-d",
        json.dumps(body),
    ]
    for key, value in {"Content-Type": "application/json", "A2A-Version": "1.0", **headers}.items():
        args += ["-H", f"{key}: {value}"]
    if unix_socket is not None:
        args += ["--unix-socket", str(unix_socket)]
    return subprocess.run(args, capture_output=True, text=True, timeout=30)


def refusal(body: dict[str, Any]) -> tuple[str, str]:
    """A refusal's (error, reason), in whichever binding's shape it came: a JSON-RPC
    error, an AIP-193 error, or the plain `{"error", "reason"}` of other routes."""
    error = body.get("error")
    if isinstance(error, dict):
        data = error.get("data") or {}
        return str(data.get("error") or error.get("status", "")), str(error["message"])
    return str(error), str(body["reason"])
