"""Shared fixtures: real tailagent servers in subprocesses, and a2a-sdk clients.

Each server is the real `tailagent serve` on an ephemeral loopback port, with its
own state dir; tests talk to it over HTTP exactly as a user's client would.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.a2a_helpers import A2A
from tests.browser import CHROMIUM, FLAGS
from tests.warm_start import WarmProcess, may_fork, start_serve

SERVING = re.compile(r"serving on (\S+)")
# A start is waited for until the server says where it serves or exits; this bound only
# stops a hang. A shared 2-core box under load took over 20 s (the binary unpacks first).
START_TIMEOUT = 90.0
# What no server may leave in its log: an asyncio task dropped before it was done, an
# event queue cancelled without being closed (each a thing opened and not closed).
UNCLOSED = re.compile(
    r".*(Task was destroyed but it is pending|without calling EventQueue.close).*"
)


@dataclass
class RunningServer:
    url: str
    process: subprocess.Popen[str] | WarmProcess
    state_dir: Path
    log_path: Path
    unclosed_reported: bool = False

    @property
    def token(self) -> str:
        """The local token the server made: how a user on this box gets in."""
        return (self.state_dir / "local-token").read_text().strip()

    def log(self) -> str:
        return self.log_path.read_text()

    def last_access_line(self) -> str:
        """The access log's line for the latest request (written just after it)."""
        time.sleep(0.1)
        return [line for line in self.log().splitlines() if "tailagent.access:" in line][-1]

    def stop(self, sig: int | None = None) -> int:
        if self.process.poll() is None:
            if sig is None:
                self.process.terminate()
            else:
                self.process.send_signal(sig)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        left = UNCLOSED.search(self.log())
        if left is not None and not self.unclosed_reported:
            self.unclosed_reported = True
            raise AssertionError(f"the server's log ({self.log_path}) says: {left.group(0)}")
        return self.process.returncode


def start_server(
    tmp: Path,
    *extra: str,
    state_dir: Path | None = None,
    program: tuple[str, ...] = ("-m", "tailagent"),
    listen: str = "127.0.0.1:0",
    env: dict[str, str] | None = None,
    command: list[str] | None = None,
) -> RunningServer:
    """Starts `tailagent serve` and waits until it says where it is serving. `command`
    runs another tailagent (the one-file binary) in place of this interpreter's."""
    state_dir = state_dir or tmp / "state"
    workspace = tmp / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    log_path = tmp / f"server-{time.monotonic_ns()}.log"
    log_file = log_path.open("w")
    args = [*(command or [sys.executable, *program]), "serve", "--listen", listen]
    if "--agent" not in extra and "--agent-command" not in extra:
        args += ["--agent", "echo"]  # the offline agent, unless a test picks another
    args += ["--state-dir", str(state_dir), "--cwd", str(workspace), *extra]
    env = {k: v for k, v in (env or os.environ).items() if not k.startswith("TAILAGENT_")}
    process: subprocess.Popen[str] | WarmProcess
    if may_fork(args, env):
        process = start_serve(args, env, log_path)
    else:
        process = subprocess.Popen(
            args, stdout=log_file, stderr=subprocess.STDOUT, text=True, env=env
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        match = SERVING.search(log_path.read_text())
        if match:
            return RunningServer(match.group(1), process, state_dir, log_path)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"tailagent serve did not start:\n{log_path.read_text()}")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: a worker per core and one more. The suite's tests wait on servers,
    agents and tailnets as well as working: on 2 cores two workers left the cores idle
    a fifth of the time, and three ran it in 982 s against 1,080 s (docs/measured.md)."""
    return (os.cpu_count() or 1) + 1


@pytest.fixture(scope="session", autouse=True)
def no_user_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every tailagent a test starts, and its CLI, find their default state dir and
    config (known agents, user units) under a tmp dir, so a forgotten --state-dir never
    reaches the user's own: a `tailagent serve` of theirs would refuse the test's start,
    and a test's would take over their state. Session-wide, so session servers have it
    too. HOME stays (npm, Go's build cache, ~/.gitconfig); Go keeps its own settings."""
    home = tmp_path_factory.mktemp("user")
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GOENV", os.environ.get("GOENV") or f"{config}/go/env")
        patch.setenv("XDG_STATE_HOME", str(home / "state"))
        patch.setenv("XDG_CONFIG_HOME", str(home / "config"))
        for name in ("STATE_DIRECTORY", "TAILAGENT_STATE_DIR", "TAILAGENT_KNOWN_AGENTS"):
            patch.delenv(name, raising=False)
        yield


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One server shared by the tests that do not restart or reconfigure it."""
    running = start_server(tmp_path_factory.mktemp("server"))
    yield running
    assert running.stop() == 0, running.log()


@pytest.fixture
async def a2a(server: RunningServer) -> A2A:
    return A2A(server.url, server.token)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """A real Chromium for a module of page tests (see tests/browser.py). Module-scoped
    on purpose: Playwright's sync API keeps its event loop running in this thread while
    it is open, and the suite's async tests need that loop gone when they run."""
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def abstract() -> Iterator[str]:
    """An abstract unix socket of the host's network namespace (a desktop session's, an
    X server's): its name, listening."""
    name = f"tailagent-test-{uuid.uuid4().hex[:8]}"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind("\0" + name)
    listener.listen()
    yield name
    listener.close()
