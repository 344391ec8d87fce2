"""Edges of a running server that a newcomer met in the first hour (issue 34): a stop
held 5 s by an open desk page and logged as an error, the stop's own line, Hypercorn's
"Running on" logged as an error, /favicon.ico refused at length on every page load,
`doctor --agent X` checking the running server's agent instead of X, `service install
--dest x.service` making a directory, `service uninstall` leaving its unit enabled."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer, start_server
from tests.test_service import uninstall
from tests.warm_start import cli_run

ICON = Path(__file__).parent.parent / "tailagent" / "web" / "static" / "icon-192.png"


def rpc(method: str, params: dict[str, Any], ident: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": method, "params": params}


def message(text: str) -> dict[str, Any]:
    return {"message": {"messageId": text, "role": "ROLE_USER", "parts": [{"text": text}]}}


def stop_timed(server: RunningServer) -> tuple[int, float]:
    """SIGTERM, as systemd and `kill` send it; (exit code, seconds until the exit)."""
    began = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    code = server.process.wait(timeout=20)
    return code, time.monotonic() - began


@pytest.fixture
def running(tmp_path: Path) -> Iterator[RunningServer]:
    server = start_server(tmp_path)
    yield server
    server.stop()


def test_open_live_streams_end_at_once_on_stop(running: RunningServer) -> None:
    headers = {"Authorization": f"Bearer {running.token}", "A2A-Version": "1.0"}
    with httpx.Client(base_url=running.url, headers=headers, timeout=30) as client:
        parked = client.post("/", json=rpc("SendMessage", message("ask"))).json()
        task_id = parked["result"]["task"]["id"]
        opened = [
            client.stream("GET", "/desk/events"),  # the list page
            client.stream("GET", f"/desk/tasks/{task_id}/events"),  # a task's page
            client.stream("POST", "/", json=rpc("SubscribeToTask", {"id": task_id}, 2)),
            client.stream("POST", "/", json=rpc("SendStreamingMessage", message("slow 30"), 3)),
        ]
        streams = [(response := stream.__enter__(), response.iter_bytes()) for stream in opened]
        for response, chunks in streams:
            assert response.status_code == 200
            assert next(chunks)  # each stream is open and has said something
        code, seconds = stop_timed(running)
        for _, chunks in streams:
            for _chunk in chunks:  # each response ends, none is cut
                pass
    log = running.log()
    assert code == 0, log
    assert seconds < 2.0, f"the stop took {seconds:.2f} s:\n{log}"
    assert "ERROR" not in log and "Traceback" not in log, log
    assert (
        "stopping: 1 unfinished task ended; 1 task waiting for an answer will wait on for the "
        "next start" in log
    )


def test_a_connection_the_stop_must_cut_is_one_warning_line(running: RunningServer) -> None:
    host, port = running.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port))) as half:
        # A request whose body never comes: it holds its connection past the stop's wait.
        half.sendall(
            f"POST / HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {running.token}"
            "\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{".encode()
        )
        time.sleep(0.3)
        code, _ = stop_timed(running)
        port_of_client = half.getsockname()[1]
    log = running.log()
    assert code == 0, log
    assert "ERROR" not in log and "Traceback" not in log, log
    assert (
        f"WARNING tailagent: stopping: cut a connection from 127.0.0.1:{port_of_client} "
        "still busy 5 s after the stop began" in log
    )


def test_the_log_says_serving_once_and_no_hypercorn_error(running: RunningServer) -> None:
    assert running.stop() == 0
    log = running.log()
    assert log.count(f"INFO tailagent: serving on {running.url} ") == 1, log
    assert "hypercorn.error" not in log and "Running on" not in log, log
    assert "stopping: 0 unfinished tasks ended\n" in log


def test_favicon_is_the_desks_icon_for_anyone_and_nothing_else_is(
    running: RunningServer,
) -> None:
    icon = httpx.get(running.url + "/favicon.ico")
    assert icon.status_code == 200
    assert icon.headers["content-type"] == "image/png"
    assert icon.content == ICON.read_bytes()
    assert running.last_access_line().endswith("anonymous GET /favicon.ico -> 200 public")
    for path in ("/favicon.ico/", "/favicon.icon", "/desk/static/icon-192.png", "/desk/"):
        assert httpx.get(running.url + path).status_code == 401, path


def doctor_agent_line(server: RunningServer, *flags: str) -> str:
    done = cli_run(
        [sys.executable, "-m", "tailagent", "doctor", "--state-dir", str(server.state_dir),
         "--tailscale-socket", str(server.state_dir / "no-tailscaled.sock"), *flags],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip
    return next(line for line in done.stdout.splitlines() if " agent: " in line)


def test_doctor_checks_the_agent_asked_for_and_says_what_the_server_runs(
    running: RunningServer,
) -> None:
    missing = doctor_agent_line(running, "--agent-command", "no-such-agent --acp")
    assert missing == (
        "✗ agent: ACP agent `no-such-agent --acp` (you asked; the running server runs echo) "
        "— fix: install no-such-agent"
    )
    present = doctor_agent_line(running, "--agent-command", f"{sys.executable} -m agent")
    program = Path(sys.executable).name  # a path is shown by its last part
    assert present == (
        f"✓ agent: ACP agent `{program} -m agent` (you asked; the running server runs echo)"
    )
    same = doctor_agent_line(running, "--agent", "echo")
    assert same == "✓ agent: echo (offline) (the running server's)"
    unasked = doctor_agent_line(running)
    assert unasked == "✓ agent: echo (offline) (the running server's)"


def install_unit(dest: Path, workspace: Path) -> subprocess.CompletedProcess[str]:
    return cli_run(
        [sys.executable, "-m", "tailagent", "service", "install", "--user",
         "--dest", str(dest), "--workspace", str(workspace)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip


def test_a_dest_naming_a_unit_file_is_that_file(tmp_path: Path) -> None:
    named = tmp_path / "units" / "my-agent.service"
    done = install_unit(named, tmp_path)
    assert done.returncode == 0, done.stderr
    assert named.is_file() and "ExecStart=" in named.read_text()
    assert done.stdout.splitlines()[:5] == [
        f"wrote {named}",
        "nothing is started; next:",
        f"  systemctl --user link {named}",
        "  systemctl --user daemon-reload",
        "  systemctl --user enable --now my-agent",
    ]
    existing = tmp_path / "unit.conf"
    existing.write_text("old\n")
    assert install_unit(existing, tmp_path).returncode == 0
    assert "ExecStart=" in existing.read_text()


def test_uninstall_that_cannot_disable_keeps_the_unit(tmp_path: Path) -> None:
    unit = tmp_path / "tailagent.service"
    assert install_unit(unit, tmp_path).returncode == 0
    denied = "Failed to disable unit: Access denied"
    result, ran = uninstall(
        tmp_path, "--user", "--dest", str(unit), unit_file=str(unit), fails=denied
    )
    assert result.returncode == 1 and ran[-1] == "--user disable --now tailagent.service"
    assert result.stderr == (
        f"tailagent: cannot stop and disable tailagent.service: {denied}; the unit stays at "
        f"{unit}: run `systemctl --user disable --now tailagent`, then uninstall again\n"
    )
    assert unit.is_file()


def test_uninstall_leaves_another_install_of_the_same_name_alone(tmp_path: Path) -> None:
    unit = tmp_path / "tailagent.service"
    assert install_unit(unit, tmp_path).returncode == 0
    theirs = "/etc/systemd/system/tailagent.service"
    result, ran = uninstall(tmp_path, "--user", "--dest", str(unit), unit_file=theirs)
    assert result.returncode == 0, result.stderr
    assert ran == ["--user show --property=FragmentPath --value tailagent.service"]
    assert result.stdout == (
        f"removed {unit} (systemd ran nothing from it; its tailagent.service is {theirs}, "
        "left alone)\n"
    )
    assert not unit.exists()
