"""`tailagent call` and `watch` across a dropped connection and a server's restart
(issue 46): they follow the task again from the last event they showed, say so in one
line on stderr, and print nothing twice.

The echo agent's `slow N` says a tick a second. The drop is a stand-in for `tailscale
serve` (tests/serve_proxy.py) cutting every connection, as a laptop's Wi-Fi would; the
person is alice, whom the fake tailscaled names for the proxy's address.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RunningServer, start_server
from tests.serve_proxy import ServeProxy
from tests.tailnet import FakeTailscaled, free_port, whois

ALICE, LAPTOP = "alice@example.com", "100.64.0.7"
ENV = {k: v for k, v in os.environ.items() if not k.startswith("TAILAGENT_")}


def until(process: subprocess.Popen[str], text: str, lines: list[str]) -> None:
    """Reads the process's stdout into `lines` until one holds `text`."""
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        lines.append(line)
        if text in line:
            return
    raise AssertionError(f"no {text!r} in {lines}")


@pytest.fixture(scope="module")
def through_serve(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningServer, ServeProxy]]:
    """The server behind a stand-in for `tailscale serve`, shared by the tests that drop
    its connections: a drop cuts the open ones only, and each test follows its own task."""
    tmp_path = tmp_path_factory.mktemp("through-serve")
    fake = FakeTailscaled(tmp_path / "ts")
    fake.peers[LAPTOP] = whois(ALICE, ip=LAPTOP)
    fake.start()
    config = tmp_path / "tailagent.toml"
    config.write_text(f'[access]\nallowed_logins = ["{ALICE}"]\n')
    server = start_server(tmp_path, "--config", str(config), "--tailscale-socket", str(fake.socket))
    proxy = ServeProxy(int(server.url.rsplit(":", 1)[1].rstrip("/")), LAPTOP).start()
    yield server, proxy
    proxy.stop()
    server.stop()
    fake.stop()


def test_call_follows_its_task_again_after_the_connection_drops(
    through_serve: tuple[RunningServer, ServeProxy],
) -> None:
    server, proxy = through_serve
    call = subprocess.Popen(
        [sys.executable, "-m", "tailagent", "call", "--url", proxy.url, "slow 4"],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    until(call, "tick 1/4", lines)
    assert proxy.drop() >= 1
    out, err = call.communicate(timeout=60)
    said = "".join(lines) + out
    assert call.returncode == 0, said + err + server.log()
    assert [said.count(f"tick {t}/4") for t in (1, 2, 3, 4)] == [1, 1, 1, 1], said
    assert said.rstrip().endswith("[completed]"), said
    (line,) = err.strip().splitlines()
    assert f"tailagent: the stream from {proxy.url} dropped" in line
    assert "following task" in line and "again from event" in line


def test_call_follows_its_task_across_a_restart_of_the_server(tmp_path: Path) -> None:
    port = free_port()
    server = start_server(tmp_path, listen=f"127.0.0.1:{port}")
    state = server.state_dir
    call = subprocess.Popen(
        [sys.executable, "-m", "tailagent", "call", "--state-dir", str(state), "slow 6"],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    try:
        until(call, "tick 2/6", lines)
        server.process.kill()  # a crash: the stream is cut, the turn dies with it
        server.process.wait()
        server = start_server(tmp_path, listen=f"127.0.0.1:{port}", state_dir=state)
        out, err = call.communicate(timeout=60)
    finally:
        server.stop()
    said = "".join(lines) + out
    assert [said.count(f"tick {t}/6") for t in (1, 2)] == [1, 1], said
    assert "restarted while this task was running" in said, said + err
    assert call.returncode == 1  # the task failed: its turn was lost
    assert "dropped" in err and len(err.strip().splitlines()) == 1, err


def test_watch_follows_the_task_again_after_the_connection_drops(
    through_serve: tuple[RunningServer, ServeProxy],
) -> None:
    """The drop comes after the first tick `watch` shows, whichever that is (its own start
    takes a second or two on a busy box), and the task has ticks left after it."""
    server, proxy = through_serve
    call = subprocess.Popen(
        [sys.executable, "-m", "tailagent", "call", "--url", proxy.url, "slow 8"],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    first: list[str] = []
    until(call, "task ", first)
    task_id = first[-1].split()[1]
    call.kill()  # the task goes on without that terminal
    call.communicate()
    watch = subprocess.Popen(
        [sys.executable, "-m", "tailagent", "watch", task_id, "--url", proxy.url],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines: list[str] = []
    until(watch, "tick ", lines)
    shown = int(lines[-1].split("tick ", 1)[1].split("/", 1)[0])
    assert shown < 8, lines  # ticks left to follow after the drop
    assert proxy.drop() >= 1
    out, err = watch.communicate(timeout=60)
    said = "".join(lines) + out
    assert watch.returncode == 0, said + err + server.log()
    assert [said.count(f"tick {t}/8") for t in range(shown, 9)] == [1] * (9 - shown), said
    assert all(said.count(f"tick {t}/8") <= 1 for t in range(1, shown)), said
    assert "completed" in said.splitlines()[-1], said
    (line,) = err.strip().splitlines()
    assert "dropped" in line and task_id in line
