"""A service's life: sd_notify with a real datagram socket standing in for systemd,
a graceful stop with turns running and waiting, a second signal, the log formats."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

import httpx
from a2a.types.a2a_pb2 import SendMessageRequest

from tailagent.store.opening import STOP_MESSAGE
from tests.a2a_helpers import A2A, state_name, texts, user_message
from tests.conftest import start_server
from tests.processes import alive, children

FAKE = Path(__file__).with_name("fake_acp_agent.py")


def receive_all(sock: socket.socket, seconds: float) -> list[str]:
    messages, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            messages.append(sock.recv(4096).decode())
        except TimeoutError:
            break
    return messages


def test_sd_notify_ready_only_when_serving_then_watchdog_then_stopping(tmp_path: Path) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(tmp_path / "notify.sock"))
    env = {**os.environ, "NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": "400000"}
    server = start_server(tmp_path, env=env)
    try:
        messages: list[str] = []
        deadline = time.monotonic() + 10
        while not any("READY=1" in m for m in messages) and time.monotonic() < deadline:
            messages += receive_all(listener, 0.2)
        ready = next(m for m in messages if "READY=1" in m)
        assert "STATUS=serving on" in ready
        assert messages[0] == "STATUS=starting"
        # READY was sent once a request got an answer: one does now, at once.
        assert httpx.get(server.url + "/healthz").status_code == 200
        pings = [m for m in receive_all(listener, 1.0) if m == "WATCHDOG=1"]
        assert 3 <= len(pings) <= 8  # every 0.2 s: half the 0.4 s systemd asked for
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=20) == 0
        tail = receive_all(listener, 0.5)
        assert any(m.startswith("STOPPING=1") for m in tail)
    finally:
        server.stop()
        listener.close()


def acp_server(tmp: Path, config: str = "") -> tuple:  # type: ignore[type-arg]
    (tmp / "c.toml").write_text(config)
    server = start_server(
        tmp, "--agent-command", f"{sys.executable} {FAKE}", "--config", str(tmp / "c.toml")
    )
    return server, A2A(server.url, server.token)


async def test_sigterm_ends_running_and_waiting_turns_and_stops_the_agents(tmp_path: Path) -> None:
    server, agent = acp_server(tmp_path)
    parked = await agent.turn("ask")
    async with agent.client() as client:
        stream = client.send_message(SendMessageRequest(message=user_message("slow 30")))
        working_id = (await anext(stream)).task.id
        await anext(stream)
        agents = children(server.process.pid)
        assert len(agents) >= 2
        server.process.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(server.process.wait, 20) == 0
    assert (
        "stopping: 1 unfinished task ended; 1 task waiting for an answer will wait on for the "
        "next start" in server.log()
    )
    assert not [pid for pid in agents if alive(pid)]
    again = start_server(tmp_path, state_dir=server.state_dir)
    try:
        reader = A2A(again.url, again.token)
        task = await reader.get(working_id)
        assert state_name(task.status.state) == "failed"
        assert texts(task.status.message) == STOP_MESSAGE, server.log()
        waiting = await reader.get(parked.task_id)  # tests/test_waiting_restart.py
        assert state_name(waiting.status.state) == "input_required"
    finally:
        again.stop()


async def test_a_second_signal_exits_at_once(tmp_path: Path) -> None:
    server, agent = acp_server(tmp_path, "[agent]\ncancel_timeout = 30\n")
    async with agent.client() as client:
        stream = client.send_message(SendMessageRequest(message=user_message("hang")))
        await anext(stream)
        await anext(stream)
        server.process.send_signal(signal.SIGTERM)  # waits up to 30 s for the deaf agent
        await asyncio.sleep(0.5)
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(server.process.wait, 10)
    assert code == 1 and time.monotonic() - started < 5
    assert "a second signal: exiting at once" in server.log()


def test_log_formats(tmp_path: Path) -> None:
    journald = start_server(tmp_path / "j", env={**os.environ, "JOURNAL_STREAM": "8:1234"})
    journald.stop()
    line = next(line for line in journald.log().splitlines() if "serving on" in line)
    assert line.startswith("INFO tailagent: serving on")
    as_json = start_server(tmp_path / "json", "--log-format", "json")
    as_json.stop()
    entries = [json.loads(line) for line in as_json.log().splitlines() if line.strip()]
    serving = next(e for e in entries if "serving on" in e["message"])
    assert serving["level"] == "info" and serving["logger"] == "tailagent"
    assert serving["time"].endswith("+00:00")
