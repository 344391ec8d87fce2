"""`tailagent call` as a user runs it: output, the reply command, --json, -i and exit codes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from a2a.types.a2a_pb2 import TaskState

from tailagent.client.render import request_start
from tests.a2a_helpers import A2A
from tests.conftest import RunningServer, start_server
from tests.tailnet import NODE_DNS, FakeTailscaled
from tests.warm_start import cli_run


def call(
    server: RunningServer, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return cli_run(
        [sys.executable, "-m", "tailagent", "call", *args, "--url", server.url],
        env=user_env(server),
        capture_output=True,
        text=True,
        timeout=30,
        input=stdin,
    )


# The command as these tests run it: the printed follow-ups name it so.
RUN_AS = "python -m tailagent "


def reply_lines(output: str) -> list[str]:
    """The follow-up commands printed, each as `tailagent call …`."""
    return [
        "tailagent " + line.strip().removeprefix(RUN_AS)
        for line in output.splitlines()
        if line.strip().startswith(RUN_AS + "call")
    ]


def user_env(server: RunningServer) -> dict[str, str]:
    """The environment of a user on the server's box (who finds its local token)."""
    return {**os.environ, "TAILAGENT_STATE_DIR": str(server.state_dir)}


def run_reply(server: RunningServer, line: str) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(line)
    return cli_run(
        [sys.executable, "-m", "tailagent", *argv[1:]],
        capture_output=True,
        text=True,
        timeout=30,
        env=user_env(server),
    )


def test_completed_turn_renders_and_exits_0(server: RunningServer) -> None:
    result = call(server, "think plan tool edit hello")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "[thinking] Thinking about" in out
    assert "[x] Read the code" in out
    assert "· Calling tool Read calc.py" in out and "✓ Read calc.py: completed" in out
    assert "+    return a + b" in out
    assert "echo: think plan tool edit hello" in out
    assert out.rstrip().endswith("[completed]")


def test_failed_turn_exits_1(server: RunningServer) -> None:
    result = call(server, "boom")
    assert result.returncode == 1
    assert "[failed] boom: the echo agent failed on purpose" in result.stdout


def test_input_required_prints_the_exact_reply_command_and_exits_3(server: RunningServer) -> None:
    asked = call(server, "ask")
    assert asked.returncode == 3
    assert "[input-required] Permission requested: Run `rm -rf build`" in asked.stdout
    allow, _deny = reply_lines(asked.stdout)
    assert "--request" in allow and allow.startswith("tailagent call allow")
    # The task keeps its conversation, and this agent is the one `call` finds by itself.
    assert "--context" not in allow and "--url" not in allow, allow
    # The task and the prompt by the starts of their ids: the line fits 80 columns.
    assert re.fullmatch(r"tailagent call allow --task \w{8} --request \w{8}", allow), allow
    # A start that is not the waiting prompt's reaches no prompt: the server says which waits.
    request = allow.rsplit(" ", 1)[1]
    other = allow.replace(request, "f" if request[0] != "f" else "e")
    refused = run_reply(server, other)
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert "nothing was applied" in refused.stdout and request in refused.stdout
    answered = run_reply(server, allow)
    assert answered.returncode == 0, answered.stdout + answered.stderr
    assert "✓ rm -rf build: completed" in answered.stdout
    assert "» allowed by token local" in answered.stdout  # who decided, in the terminal


def test_question_reply_command_answers_it(server: RunningServer) -> None:
    asked = call(server, "question")
    assert asked.returncode == 3
    (answer,) = reply_lines(asked.stdout)
    assert "--answer 'Which colour do you prefer?=red'" in answer
    assert asked.stdout.count("Which colour do you prefer?") == 2  # the prompt, the reply
    assert "  options: red, blue" in asked.stdout
    wrong = run_reply(server, answer.replace("=red", "=green"))
    assert wrong.returncode == 2
    assert "'green' does not answer 'Which colour do you prefer?'" in wrong.stderr
    assert "pick one of 'red', 'blue'" in wrong.stderr
    answered = run_reply(server, answer)
    assert answered.returncode == 0
    assert "You chose red." in answered.stdout


def test_json_prints_one_object_per_event(server: RunningServer) -> None:
    result = call(server, "think", "--json")
    assert result.returncode == 0
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert "task" in events[0]
    assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert any(
        e.get("artifactUpdate", {}).get("artifact", {}).get("artifactId") == "thinking"
        for e in events
    )


def test_interactive_answers_in_place(server: RunningServer) -> None:
    result = call(server, "ask then question", "-i", stdin="yes\nblue\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("task ") == 1  # the header, once for the whole conversation
    assert "options: option:allow_once (Allow)" in result.stdout
    assert "✓ rm -rf build: completed" in result.stdout
    assert "You chose blue." in result.stdout


def test_usage_and_connection_errors_exit_2(server: RunningServer) -> None:
    nothing = call(server)
    assert nothing.returncode == 2 and "nothing to send" in nothing.stderr
    unreachable = cli_run(
        [sys.executable, "-m", "tailagent", "call", "hi", "--url", "http://127.0.0.1:9"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert unreachable.returncode == 2
    assert len(unreachable.stderr.strip().splitlines()) == 1
    assert "nothing answers at http://127.0.0.1:9: start `tailagent serve`" in unreachable.stderr
    unknown = call(server, "hi", "--task", "no-such-task")
    assert unknown.returncode == 2
    assert "refused the request" in unknown.stderr and "Traceback" not in unknown.stderr


def test_a_refusal_is_one_line_with_the_servers_reason(server: RunningServer) -> None:
    result = call(server, "hi", "--token", "ta_not-a-real-token")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "401 unauthorized: the bearer token is not valid" in line


def test_a_unix_socket_server_is_called_by_its_socket_or_found_by_its_state_dir(
    tmp_path: Path,
) -> None:
    """The service unit's own listener: its card advertises the tailnet URL, yet the
    call goes to the socket (the card's URLs are pointed back at it)."""
    socket_path = tmp_path / "run" / "tailagent.sock"
    server = start_server(tmp_path, "--public-url", "https://devbox.example.ts.net",
                          listen=f"unix:{socket_path}")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILAGENT_")}
    try:
        for where in (["--url", f"unix:{socket_path}"], []):
            result = cli_run(
                [sys.executable, "-m", "tailagent", "call", "hello socket", "--state-dir",
                 str(server.state_dir), *where],
                env=env, capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            assert "hello socket" in result.stdout
        bad = cli_run(
            [sys.executable, "-m", "tailagent", "call", "x", "--url", "unix:relative.sock"],
            env=env, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert bad.returncode == 2 and "absolute path" in bad.stderr
    finally:
        assert server.stop() == 0


def test_a_call_on_this_box_stays_on_the_loopback_listener(tmp_path: Path) -> None:
    """The card names the tailnet URL (--public-url), which resolves nowhere here, as on
    a box whose tailscaled is down: a call on this box still reaches its server on
    loopback, with the local token, and a follow-up names no other URL."""
    server = start_server(tmp_path, "--public-url", "https://devbox.invalid")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILAGENT_")}
    try:
        for where in (["--url", server.url], []):
            result = cli_run(
                [sys.executable, "-m", "tailagent", "call", "ask:cleanup", "--state-dir",
                 str(server.state_dir), *where],
                env=env, capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            assert result.returncode == 3, result.stderr
            assert "devbox.invalid" not in result.stdout + result.stderr
    finally:
        assert server.stop() == 0


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["stop", "crash"])
def test_a_stream_the_server_ends_shows_why(tmp_path: Path, how: int) -> None:
    """A server that stops mid-turn ends the stream with the task's failure, and the
    CLI shows it; one that dies leaves the CLI saying the task's state cannot be read.
    Never a silent stop at the last line it got."""
    server = start_server(tmp_path)
    process = subprocess.Popen(
        [sys.executable, "-m", "tailagent", "call", "slow 20", "--url", server.url],
        env=user_env(server), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        seen = ""
        while "tick 1" not in seen:
            line = process.stdout.readline()
            assert line, process.stderr.read() if process.stderr else ""
            seen += line
        server.stop(how)
        rest, errors = process.communicate(timeout=30)
    finally:
        process.kill()
    if how == signal.SIGTERM:
        assert process.returncode == 1, errors
        assert "[failed] The server stopped while this task was running" in rest, rest + errors
    else:  # its end cannot be read: a connection error
        assert process.returncode == 2, errors
        assert "ended before task" in errors and "cannot be read now" in errors, errors


def cli(server: RunningServer, *args: str) -> subprocess.CompletedProcess[str]:
    return cli_run(
        [sys.executable, "-m", "tailagent", *args, "--url", server.url],
        env=user_env(server), capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def task_state(server: RunningServer, task_id: str) -> str:
    """The task's state, read by an A2A client in this process (no CLI to test there)."""
    task = asyncio.run(A2A(server.url, server.token).get(task_id))
    return TaskState.Name(task.status.state)


def test_ctrl_c_cancels_the_task_and_tasks_watch_cancel_follow_it(server: RunningServer) -> None:
    # A script's Ctrl-C (stdin is not a terminal) cancels at once. Each step waits for
    # what it acts on (the task's header, a tick), never a clock: a loaded box is slow.
    interrupted = subprocess.Popen(
        [sys.executable, "-m", "tailagent", "call", "slow 60", "--url", server.url],
        env=user_env(server), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert interrupted.stdout is not None
        header = interrupted.stdout.readline()  # `task <id>  context <id>`: it runs
        interrupted.send_signal(signal.SIGINT)
        out, errors = interrupted.communicate(timeout=60)
    finally:
        interrupted.kill()
    assert interrupted.returncode == 130, header + errors
    task_id = header.split()[1]
    assert f"tailagent: canceled task {task_id}" in errors, errors
    assert "[canceled]" in out
    assert task_state(server, task_id) == "TASK_STATE_CANCELED"

    # `tasks`: newest first, with states; `watch` follows a running task to its end.
    running = subprocess.Popen(
        [sys.executable, "-m", "tailagent", "call", "slow 60", "--json", "--url", server.url],
        env=user_env(server), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    watching = None
    try:
        assert running.stdout is not None
        started = json.loads(running.stdout.readline())["task"]["id"]
        table = cli(server, "tasks")
        assert table.stdout.splitlines()[1].split()[:2] == [started, "working"], table.stdout
        watching = subprocess.Popen(
            [sys.executable, "-m", "tailagent", "watch", started, "--url", server.url],
            env=user_env(server), stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert watching.stdout is not None
        followed = ""
        while "tick " not in followed:  # the task's own events, as they come
            line = watching.stdout.readline()
            assert line, followed
            followed += line
        # `cancel` ends the running task; `watch` and the call that started it see it end.
        canceled = cli(server, "cancel", started)
        assert canceled.returncode == 0 and canceled.stdout.strip() == f"task {started}: canceled"
        rest = watching.communicate(timeout=60)[0]
        last = rest.strip().splitlines()[-1]
        assert watching.returncode == 1 and last.startswith("[canceled]"), followed + rest
        running.communicate(timeout=60)
    finally:
        running.kill()
        if watching is not None:
            watching.kill()
    again = cli(server, "watch", started)  # an ended task: its state, at once
    assert again.returncode == 1 and "[canceled]" in again.stdout

    # `cancel`: a task that waits for an answer (made in this process: `call ask` is
    # tested above).
    waiting = asyncio.run(A2A(server.url, server.token).turn("ask")).task_id
    assert task_state(server, waiting) == "TASK_STATE_INPUT_REQUIRED"
    canceled = cli(server, "cancel", waiting)
    assert canceled.returncode == 0 and canceled.stdout.strip() == f"task {waiting}: canceled"
    unknown = cli(server, "cancel", "no-such-task")  # as for watch (tests/test_cli_edges.py)
    assert unknown.returncode == 2
    assert unknown.stderr.endswith("refused the request: Task not found\n"), unknown.stderr


def test_the_server_says_what_to_do_next(server: RunningServer, tmp_path: Path) -> None:
    log = server.log()
    assert f"on this box: tailagent call hello --state-dir {server.state_dir}" in log
    assert f"the approval desk: {server.url}/desk/ (sign in here with `tailagent web" in log
    assert "no tailscaled" in log and "--tsnet" in log
    fake = FakeTailscaled(tmp_path / "ts").start()
    served = start_server(tmp_path, "--tailscale-socket", str(fake.socket))
    try:
        wanted = f"on the tailnet ({NODE_DNS}): `tailscale serve --bg {served.url}`"
        deadline = time.monotonic() + 10  # the lines follow `serving on`
        while wanted not in served.log():
            assert time.monotonic() < deadline, served.log()
            time.sleep(0.05)
    finally:
        served.stop()
        fake.stop()


def test_the_message_can_come_from_stdin(server: RunningServer) -> None:
    for args in (["-"], []):
        result = call(server, *args, stdin="a message\nfrom a file\n")
        assert result.returncode == 0, result.stderr
        assert "echo: a message\nfrom a file" in result.stdout


def test_shell_completion(tmp_path: Path) -> None:
    line = "tailagent call --can"
    env = {
        **os.environ, "COMP_LINE": line, "COMP_POINT": str(len(line)), "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": " ", "_ARGCOMPLETE_STDOUT_FILENAME": str(tmp_path / "out"),
    }  # fmt: skip
    cli_run([sys.executable, "-m", "tailagent"], env=env, timeout=30, check=False)
    assert (tmp_path / "out").read_text().split() == ["--cancel-on-interrupt"]
    # Each shell's own way of registering a completer for the tailagent command.
    registers = {
        "bash": "complete -o",
        "zsh": "compdef tailagent",
        "fish": "complete --command tailagent",
    }
    for shell, registration in registers.items():
        script = cli_run(
            [sys.executable, "-m", "tailagent", "completion", shell],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert script.returncode == 0 and registration in script.stdout, script.stdout[:300]


def test_a_printed_request_start_keeps_what_differs_between_prompts() -> None:
    """Relayed prompts all begin `delegate-`: their printed start goes 8 characters past
    it, or a later prompt of the task would fit the start printed for an earlier one."""
    assert request_start("27e6a9f0c1d24e5f8a9b0c1d2e3f4a5b") == "27e6a9f0"
    assert request_start("delegate-2ffc9a61e0b14c2d") == "delegate-2ffc9a61"
    assert request_start("toolu_01AbCdEfGhIj") == "toolu_01AbCdEf"
