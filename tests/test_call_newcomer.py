"""`tailagent call` as a newcomer meets it at 80 columns (issue 34): a reader that goes
away, bytes that are not UTF-8, a connection that drops mid-stream, where a turn's
changes went, an --answer for a permission prompt, a second cancel, --json counts and
the echo agent's `edit:PATH`. Each through the real CLI and a real server."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from a2a.types.a2a_pb2 import TaskState
from google.protobuf.json_format import MessageToDict

from tests.a2a_helpers import A2A
from tests.conftest import RunningServer, start_server
from tests.test_isolation import git, make_project, worktree_path
from tests.warm_start import cli_run

RUN_AS = "python -m tailagent"  # how the follow-up commands name the CLI these tests run


def user_env(server: RunningServer) -> dict[str, str]:
    """A user of the server's box at an 80-column terminal (who finds its local token)."""
    return {**os.environ, "TAILAGENT_STATE_DIR": str(server.state_dir), "COLUMNS": "80"}


def tailagent(
    server: RunningServer, *args: str | bytes, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    return cli_run(
        [sys.executable, "-m", "tailagent", *args],
        env=user_env(server), input=stdin, capture_output=True, timeout=60,
    )  # fmt: skip


def text(done: subprocess.CompletedProcess[bytes]) -> tuple[str, str]:
    return done.stdout.decode(), done.stderr.decode()


def task_of(output: str) -> str:
    """The task id the call's header names."""
    return output.split("task ", 1)[1].split()[0]


async def asking(server: RunningServer) -> str:
    """A task that waits for permission, made by an A2A client in this process: what
    the CLI then meets (its own `call ask` is tested elsewhere)."""
    asked = await A2A(server.url, server.token).turn("ask")
    assert asked.final_state == "input_required", asked.kinds()
    return asked.task_id


async def ended(server: RunningServer, task_id: str) -> str:
    """The task's state once it has ended: read until it has, as `watch` waits."""
    a2a = A2A(server.url, server.token)
    deadline = time.monotonic() + 60
    going = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    while (state := (await a2a.get(task_id)).status.state) in going:
        assert time.monotonic() < deadline, f"task {task_id} still works"
        await asyncio.sleep(0.2)
    return TaskState.Name(state)


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_reader_that_goes_away_ends_the_call_with_141_and_the_task_goes_on(
    server: RunningServer, as_json: bool
) -> None:
    """`tailagent call "slow 3" | head -1`: the next write meets a closed pipe."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tailagent", "call", "slow 3", *(["--json"] if as_json else [])],
        env=user_env(server), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    first = process.stdout.readline().decode()
    process.stdout.close()  # `head -1` is done
    errors = process.stderr.read().decode()
    assert (process.wait(timeout=30), errors) == (141, "")
    task_id = json.loads(first)["task"]["id"] if as_json else task_of(first)
    # The task went on without the call.
    assert asyncio.run(ended(server, task_id)) == "TASK_STATE_COMPLETED"


def test_a_message_that_is_not_utf8_goes_with_u_fffd_and_a_line_says_so(
    server: RunningServer,
) -> None:
    said = "tailagent: the message holds bytes that are not UTF-8: sent as \ufffd (U+FFFD)\n"
    for done in (
        tailagent(server, "call", "-", stdin=b"caf\xe9\n"),  # printf 'caf\xe9\n' | … call -
        tailagent(server, "call", b"caf\xe9"),  # tailagent call "$(printf 'caf\xe9')"
    ):
        out, errors = text(done)
        assert (done.returncode, errors) == (0, said), errors
        assert "echo: caf\ufffd\n[completed]" in out, out


class DroppingProxy:
    """Forwards TCP to the server until `drop()`: then the open connections end and every
    new one is reset as it comes (a box gone from the network mid-stream)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.upstream = 0
        self._dropped = threading.Event()
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            if self._dropped.is_set():
                client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                client.close()  # a reset, not a close
                continue
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def drop(self) -> None:
        self._dropped.set()
        for sock in self._open:
            with contextlib.suppress(OSError):  # already closed by its other end
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.drop()
        self.listener.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass


@pytest.fixture
def dropping(tmp_path: Path) -> Iterator[tuple[RunningServer, DroppingProxy]]:
    proxy = DroppingProxy()
    url = f"http://127.0.0.1:{proxy.port}"
    server = start_server(tmp_path, "--public-url", url)  # its card sends callers through
    proxy.upstream = int(server.url.rsplit(":", 1)[1])
    yield server, proxy
    proxy.close()
    server.stop()


def test_a_connection_dropped_mid_stream_says_why_and_exits_2(
    dropping: tuple[RunningServer, DroppingProxy],
) -> None:
    """The task cannot be followed again nor its state read (each new connection is
    reset): after the line saying it tries, the last line ends in the reason (the
    OS's), not in a2a-sdk's empty "Network communication error: ", and the exit code
    is a connection error's."""
    server, proxy = dropping
    url = f"http://127.0.0.1:{proxy.port}"
    process = subprocess.Popen(
        [sys.executable, "-m", "tailagent", "call", "slow 20", "--url", url,
         "--token", server.token],
        env=user_env(server), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        while "tick 1" not in (line := process.stdout.readline()):
            assert line, process.stderr.read() if process.stderr else ""
        proxy.drop()
        _, errors = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 2, errors
    trying, gave_up = errors.splitlines()
    assert re.fullmatch(
        rf"tailagent: the stream from {url} dropped \(.+\); following task \S+ again from "
        r"event \d+",
        trying,
    ), errors
    assert re.fullmatch(
        rf"tailagent: the stream from {url} ended before task \S+ did \(.+\), and its state "
        r"cannot be read now: Network communication error: \S.*\S",
        gave_up,
    ), errors


@pytest.fixture
def repo_server(tmp_path: Path) -> Iterator[tuple[RunningServer, Path]]:
    repo = tmp_path / "workspace"
    make_project(repo)
    server = start_server(tmp_path, "--isolation", "worktree")
    yield server, repo
    server.stop()


def test_a_turn_that_changed_files_ends_with_its_branch_and_what_to_do(
    repo_server: tuple[RunningServer, Path],
) -> None:
    server, repo = repo_server
    done = tailagent(server, "call", "edit")
    out, errors = text(done)
    assert done.returncode == 0, errors
    short = out.split("context ", 1)[1][:8]
    assert out.splitlines()[-2:] == [
        f"changes on tailagent/{short} (+1 commit, calc.py) —",
        f"  {RUN_AS} diff {short} · {RUN_AS} merge {short}",
    ], out
    own = worktree_path(server.state_dir, f"tailagent/{short}")  # in its own repository
    assert git(own, "diff", "--name-only", "main", f"tailagent/{short}") == "calc.py\n"
    assert git(repo, "branch", "--list", "tailagent/*") == ""

    # --json: the last event says so in a field, its counts (and all others) integers.
    lines = tailagent(server, "call", "edit", "--json").stdout.splitlines()
    events = [json.loads(line) for line in lines]
    last = events[-1]
    short = last["statusUpdate"]["contextId"][:8]
    assert last["changes"] == {
        "branch": f"tailagent/{short}", "base": "main", "ahead": 1, "behind": 0,
        "files": ["calc.py"], "context": short,
        "diff": f"{RUN_AS} diff {short}", "merge": f"{RUN_AS} merge {short}",
    }  # fmt: skip
    assert b'"ahead": 1.0' not in b"".join(lines) and b'"turns": 1.0' not in b"".join(lines)
    assert type(last["statusUpdate"]["metadata"]["worktree"]["ahead"]) is int
    listed = tailagent(server, "tasks", "--json", "--limit", "1").stdout
    assert type(json.loads(listed)["metadata"]["worktree"]["ahead"]) is int, listed
    assert all("changes" not in e for e in events[:-1])

    # Many files: as many named as fit in 80 columns, the commands whole.
    names = " ".join(f"edit:dir/file-{n}.txt" for n in range(6))
    many = text(tailagent(server, "call", names))[0].splitlines()
    head = r"changes on tailagent/\w{8} \(\+1 commit, dir/file-0\.txt, 5 more files\) —"
    assert re.fullmatch(head, many[-2]) and len(many[-2]) <= 80, many
    assert many[-1].startswith(f"  {RUN_AS} diff "), many

    # A turn that changed nothing has no such line.
    hello = text(tailagent(server, "call", "hello"))[0]
    assert hello.splitlines()[-1] == "[completed]", hello


async def test_answer_to_a_permission_prompt_is_refused_here_and_nothing_is_sent(
    server: RunningServer,
) -> None:
    task_id = await asking(server)
    done = tailagent(server, "call", "--answer", "Q=LABEL", "--task", task_id)
    assert (done.returncode, text(done)) == (2, ("", (
        f"tailagent: task {task_id} asks for permission (Run `rm -rf build`), not a question: "
        "answer it with allow or deny (or option:ID), not --answer\n"
    )))  # fmt: skip
    (still,) = await A2A(server.url, server.token).list(page_size=1)  # the newest task
    assert (still.id, still.status.state) == (task_id, TaskState.TASK_STATE_INPUT_REQUIRED)
    assert "decision" not in MessageToDict(still.metadata)  # nobody answered it


async def test_a_second_cancel_says_it_once(server: RunningServer) -> None:
    task_id = await asking(server)
    canceled = await A2A(server.url, server.token).cancel(task_id)
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    again = tailagent(server, "cancel", task_id)
    assert (again.returncode, text(again)) == (1, ("", (
        f"tailagent: Task {task_id} has already been canceled: nothing to cancel.\n"
    )))  # fmt: skip


def test_the_echo_agent_writes_the_path_it_is_given_and_only_inside(tmp_path: Path) -> None:
    server = start_server(tmp_path)  # not a git repository: it writes in the workspace
    try:
        outside = tmp_path / "outside.txt"
        prompt = f"edit:README.md edit:notes/Hello.txt edit:{outside} edit:../up.txt"
        out = text(tailagent(server, "call", prompt))[0]
    finally:
        server.stop()
    workspace = tmp_path / "workspace"
    assert sorted(str(p.relative_to(workspace)) for p in workspace.rglob("*")) == [
        "README.md", "notes", "notes/Hello.txt",
    ]  # fmt: skip
    assert (workspace / "notes" / "Hello.txt").read_text() == prompt + "\n"
    assert not outside.exists() and not (tmp_path / "up.txt").exists()
    for path in (str(outside), "../up.txt"):
        refused = f"{path}: the echo agent writes inside its working directory only"
        assert f"✗ Edit {path}: failed\n  {refused}\n" in out, out
