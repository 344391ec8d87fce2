"""The server's secrets out of its agents' reach (tailagent/process/secret_env.py), through a real
server and tests/fake_acp_agent.py, which reads /proc itself (`peek`), as an agent that
wanted them would: no ACP call is involved.

The tests run as root, who may read any process's /proc/<pid>/environ; what keeps the
secrets from an agent there is that the server's environment block no longer holds
them.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import test_binary
from tests.a2a_helpers import A2A
from tests.conftest import RunningServer, start_server
from tests.processes import children
from tests.test_acp import agent_command, answer_text
from tests.test_worktrees import commit_all, sh, write

# test_binary's fixture: the one-file binary, built if it is not up to date.
binary = test_binary.binary


def marker() -> str:
    return f"marker-{uuid.uuid4().hex}"


def started_with(tmp: Path, environment: dict[str, str], *extra: str) -> RunningServer:
    """The real server (with the fake ACP agent unless `extra` names another), its
    environment given on `env`'s command line: start_server drops TAILAGENT_ variables
    from the one it is handed. `env` execs, so the server has its pid."""
    settings = [f"{name}={value}" for name, value in environment.items()]
    return start_server(
        tmp,
        *(extra or ("--agent-command", agent_command())),
        command=["env", *settings, sys.executable, "-m", "tailagent"],
    )


@pytest.fixture
def a_process_with_a_secret() -> Iterator[tuple[int, str]]:
    """Some other process whose environment holds a marker: what a leak would look like."""
    secret = marker()
    process = subprocess.Popen(["sleep", "60"], env={"TS_AUTHKEY": secret})
    yield process.pid, secret
    process.kill()
    process.wait()


async def peek(server: RunningServer, *looks: tuple[str, str]) -> str:
    """The fake agent's answer to peeking at each file for its marker."""
    words = " ".join(f"peek:{path} {marker_}" for path, marker_ in looks)
    return answer_text(await A2A(server.url, server.token).turn(words))


async def test_an_agent_cannot_read_the_servers_secrets_in_its_environ(
    tmp_path: Path, a_process_with_a_secret: tuple[int, str]
) -> None:
    key, password = marker(), marker()
    # A store URL is where a database password goes; this one names a SQLite file.
    store = tmp_path / f"{password}.db"
    # Unfenced (sandbox.mode = off), where the agent sees the server's /proc: the
    # server's own environment must then hold no secret. Fenced, it sees no /proc of the
    # server at all (below).
    environment = {
        "TS_AUTHKEY": key,
        "TAILAGENT_STORE": f"sqlite+aiosqlite:///{store}",
        "TAILAGENT_SANDBOX_MODE": "off",
    }
    server = started_with(tmp_path, environment)
    try:
        environ = f"/proc/{server.process.pid}/environ"
        other_pid, other_secret = a_process_with_a_secret
        answer = await peek(
            server, (environ, key), (environ, password), (environ, "PATH="),
            (f"/proc/{other_pid}/environ", other_secret),
        )  # fmt: skip
        seen = re.findall(r"peek /proc/\d+/environ parent=(\d+) bytes=\d+ marker=(\w+)", answer)
        parent = str(server.process.pid)
        # The agent's parent is the server; it reads the server's environ (PATH is
        # there) but not the secrets, which it does see in another process's.
        assert seen == [(parent, "no"), (parent, "no"), (parent, "yes"), (parent, "yes")], answer
        assert store.exists()  # the server still used its setting
    finally:
        assert server.stop() == 0


async def test_a_fenced_agent_sees_no_process_of_the_server_or_the_box(
    tmp_path: Path, a_process_with_a_secret: tuple[int, str]
) -> None:
    key = marker()
    server = started_with(tmp_path, {"TS_AUTHKEY": key})
    try:
        other_pid, other_secret = a_process_with_a_secret
        answer = await peek(
            server,
            (f"/proc/{server.process.pid}/environ", key),
            (f"/proc/{other_pid}/environ", other_secret),
        )
        # Its parent is the fence's own (bwrap's pid 1, or the proxy's bridge under it).
        gone = re.findall(r"peek /proc/(\d+)/environ parent=[12] error=No such file", answer)
        assert gone == [str(server.process.pid), str(other_pid)], answer
    finally:
        assert server.stop() == 0


DUMPABLE = """
import ctypes, os, sys
from tailagent.process.secret_env import environ, hide
hide()
libc = ctypes.CDLL(None)
block = open("/proc/self/environ", "rb").read()
print(os.getpid(), libc.prctl(3, 0, 0, 0, 0), environ().get("TS_AUTHKEY"),  # PR_GET_DUMPABLE
      "TS_AUTHKEY" in os.environ, b"TS_AUTHKEY=" in block)
"""


def test_the_server_is_not_dumpable_and_keeps_its_pid_and_its_secrets(tmp_path: Path) -> None:
    """Not dumpable: another process of the server's user (not root) may not read its
    memory, environ or descriptors in /proc, nor ptrace it. The tests run as root, whom
    that does not stop, so this asks the process itself (PR_GET_DUMPABLE)."""
    key = marker()
    process = subprocess.Popen(
        [sys.executable, "-c", DUMPABLE],
        env={**os.environ, "TS_AUTHKEY": key},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = process.communicate(timeout=60)
    # The same pid, not dumpable, the key kept but neither in os.environ nor in the block.
    assert out.split() == [str(process.pid), "0", key, "False", "False"], err


def notifications(sock: socket.socket, seconds: float) -> list[tuple[int, str]]:
    """The datagrams systemd would get, each with the pid the kernel says sent it."""
    got, deadline = [], time.monotonic() + seconds
    size = struct.calcsize("3i")
    while time.monotonic() < deadline:
        sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            data, ancillary, _, _ = sock.recvmsg(4096, socket.CMSG_SPACE(size))
        except TimeoutError:
            break
        pid = next(
            struct.unpack("3i", cmsg[2][:size])[0]
            for cmsg in ancillary
            if cmsg[:2] == (socket.SOL_SOCKET, socket.SCM_CREDENTIALS)
        )
        got.append((pid, data.decode()))
    return got


def test_systemd_hears_from_the_main_pid_with_the_secrets_taken_out(
    tmp_path: Path,
) -> None:
    path = tmp_path / "notify.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    listener.bind(str(path))
    key = marker()
    environment = {"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "400000", "TS_AUTHKEY": key}
    server = started_with(tmp_path, environment)
    try:
        pid = server.process.pid
        assert key.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
        heard = notifications(listener, 3.0)
        assert any("READY=1" in text for _, text in heard), heard
        assert sum(text == "WATCHDOG=1" for _, text in heard) >= 3, heard
        assert {sender for sender, _ in heard} == {pid}  # MainPID, as Type=notify needs
    finally:
        assert server.stop() == 0
        listener.close()


async def test_no_process_the_server_starts_is_handed_the_secrets(tmp_path: Path) -> None:
    """Not even git's hooks, which run what the repository holds when the person lets
    them (`workspace.git_programs`): the secrets are not in the server's os.environ."""
    repo = tmp_path / "workspace"
    sh(tmp_path, "init", "-q", "-b", "main", str(repo))
    write(repo / "calc.py", "def add(a, b):\n    return a - b\n")
    commit_all(repo, "start")
    seen = tmp_path / "hook-environment"
    hook = repo / ".git" / "hooks" / "post-commit"
    write(hook, f"#!/bin/sh\nenv > '{seen}'\n")
    hook.chmod(0o755)
    config = tmp_path / "tailagent.toml"
    config.write_text("[workspace]\ngit_programs = true\n")
    key = marker()
    server = started_with(
        tmp_path,
        {"TS_AUTHKEY": key, "TAILAGENT_TOKEN": key, "SOMETHING_ELSE": "kept"},
        "--isolation", "worktree", "--config", str(config),
    )  # fmt: skip
    try:
        turn = await A2A(server.url, server.token).turn("hello\nedit:notes.txt")
        assert turn.final_state == "completed"
        hook_saw = seen.read_text()  # the turn's commit ran the hook
        assert "SOMETHING_ELSE=kept" in hook_saw  # the rest of the environment is as it was
        assert key not in hook_saw
    finally:
        assert server.stop() == 0


def test_the_one_file_binary_serves_without_them_and_says_its_launcher_keeps_them(
    binary: Path, tmp_path: Path
) -> None:
    """The binary's launcher (PyInstaller's bootloader) runs the interpreter as its child
    and keeps its own environment: the child's is clean, and the start says so."""
    key = marker()
    server = start_server(tmp_path, command=["env", f"TS_AUTHKEY={key}", str(binary)])
    try:
        (interpreter,) = children(server.process.pid)
        assert key.encode() not in Path(f"/proc/{interpreter}/environ").read_bytes()
        assert key.encode() in Path(f"/proc/{server.process.pid}/environ").read_bytes()
        warned = f"the one-file binary's launcher (PID {server.process.pid}) keeps TS_AUTHKEY"
        assert warned in server.log()
    finally:
        assert server.stop() == 0
