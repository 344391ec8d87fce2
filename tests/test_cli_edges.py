"""What a new user trips over with the CLI, each reproduced from a fresh clone and
fixed: whose token goes where, a state dir with no server, output piped into `head`,
unknown tasks and ended ones, a misspelt option, a TOML file with `agent` twice, a
pinned key with no server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from a2a.types.a2a_pb2 import TaskState

from tests.a2a_helpers import A2A, user_message
from tests.conftest import RunningServer, start_server
from tests.warm_start import cli_run


def tailagent(
    *args: str, env: dict[str, str] | None = None, stdout: int = subprocess.PIPE
) -> subprocess.CompletedProcess[str]:
    return cli_run(
        [sys.executable, "-m", "tailagent", *args],
        stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=60,
        env=env or os.environ.copy(),
    )  # fmt: skip


def as_user(state_dir: Path, home: Path) -> dict[str, str]:
    """A user whose own server runs on `state_dir`, and whose default state dir (where
    a `tailagent serve` with no --state-dir keeps its state) is under `home`."""
    return {
        **os.environ,
        "TAILAGENT_STATE_DIR": str(state_dir),
        "XDG_STATE_HOME": str(home),
        "TAILAGENT_KNOWN_AGENTS": str(home / "known.json"),
    }


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def two_servers(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningServer, RunningServer, Path]]:
    """One server on TCP (the state dir the user names), one on a unix socket in the
    user's default state dir, as a box with a service and a user's own server has.
    Shared by the module's tests: each only calls them and reads where they are."""
    tmp_path = tmp_path_factory.mktemp("two-servers")
    home = tmp_path / "home"
    mine = start_server(tmp_path / "mine")
    socket_path = tmp_path / "other.sock"
    other = start_server(
        tmp_path / "other",
        state_dir=home / "tailagent",
        listen=f"unix:{socket_path}",
    )
    yield mine, other, home
    mine.stop()
    other.stop()


def test_a_command_aimed_at_another_server_sends_that_servers_own_token(
    two_servers: tuple[RunningServer, RunningServer, Path],
) -> None:
    mine, other, home = two_servers
    env = as_user(mine.state_dir, home)
    here = tailagent("call", "hello", env=env)
    assert here.returncode == 0, here.stderr
    there = tailagent("call", "hello", "--url", other.url, env=env)
    assert there.returncode == 0, there.stderr
    assert "echo: hello" in there.stdout
    # A server on this box whose state dir this user cannot find: no other server's
    # token is sent, and the refusal says what to do.
    stray = start_server(home.parent / "stray", state_dir=home.parent / "stray-state")
    try:
        refused = tailagent("call", "hello", "--url", stray.url, env=env)
        assert refused.returncode == 2
        assert "401" in refused.stderr, refused.stderr
        said = " ".join(refused.stderr.split())
        assert (
            f"no tailagent server on this box that this user can read listens at {stray.url}"
            in said
        )
        assert "pass its --state-dir, or a --token" in refused.stderr
    finally:
        stray.stop()


def test_a_state_dir_with_no_server_is_said_so(
    two_servers: tuple[RunningServer, RunningServer, Path], tmp_path: Path
) -> None:
    mine, _, home = two_servers
    empty = tmp_path / "empty"
    done = tailagent("call", "hi", "--state-dir", str(empty), env=as_user(mine.state_dir, home))
    assert done.returncode == 2
    line = done.stderr.strip()
    assert line.startswith(f"tailagent: no tailagent server runs on the state dir {empty}")
    assert f"{mine.url} (state dir {mine.state_dir})" in line  # where one does run
    assert f"`tailagent serve --state-dir {empty}`" in line


def closed_stdout(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Runs a command whose reader has gone before it writes (`| head -1` that is done)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tailagent", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env or os.environ.copy(),
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    errors = process.stderr.read().decode()
    return process.wait(timeout=60), errors


async def test_output_piped_into_head_ends_quietly(server: RunningServer) -> None:
    env = {**os.environ, "TAILAGENT_STATE_DIR": str(server.state_dir)}
    a2a = A2A(server.url, server.token)  # a decision, for audit to list
    asked = await a2a.turn("ask")
    assert asked.final_state == "input_required", asked.kinds()
    allowed = await a2a.turn(user_message("yes", task_id=asked.task_id))
    assert allowed.final_state == "completed", allowed.kinds()
    for args in (("audit", "--json"), ("tasks", "--json"), ("completion", "bash")):
        code, errors = closed_stdout(*args, env=env)
        assert (code, errors) == (141, ""), (args, errors)


async def test_unknown_and_ended_tasks(server: RunningServer) -> None:
    env = {**os.environ, "TAILAGENT_STATE_DIR": str(server.state_dir)}
    for args in (("cancel", "nope"), ("watch", "nope"), ("call", "hi", "--task", "nope")):
        done = tailagent(*args, env=env)
        assert done.returncode == 2, (args, done.stderr)
        assert "not found" in done.stderr.lower(), done.stderr
    # The ended tasks are made by an A2A client in this process: the CLI meets them.
    a2a = A2A(server.url, server.token)
    task_id = (await a2a.turn("ask")).task_id
    assert (await a2a.cancel(task_id)).status.state == TaskState.TASK_STATE_CANCELED
    again = tailagent("cancel", task_id, env=env)
    assert again.returncode == 1
    assert f"Task {task_id} has already been canceled: nothing to cancel." in again.stderr
    done = await a2a.turn("hello")
    assert done.final_state == "completed", done.kinds()
    finished = done.task_id
    late = tailagent("call", "yes", "--task", finished, env=env)
    assert late.returncode == 2
    assert f"Task {finished} has already completed: send a new message" in late.stderr
    assert "TASK_STATE_" not in late.stderr


def test_a_misspelt_option_gets_the_commands_usage_and_a_suggestion() -> None:
    done = tailagent("serve", "--agnet", "echo")
    assert done.returncode == 2
    assert done.stderr.startswith("usage: tailagent serve ")
    last = done.stderr.strip().splitlines()[-1]
    assert last == (
        "tailagent serve: error: unrecognized arguments: --agnet echo (did you mean --agent?)"
    )


def test_agent_both_a_value_and_a_table_says_what_to_write(tmp_path: Path) -> None:
    config = tmp_path / "tailagent.toml"
    config.write_text('agent = "echo"\n[agent]\nwarm_spares = 0\n')
    done = tailagent("serve", "--config", str(config), "--state-dir", str(tmp_path / "s"))
    assert done.returncode == 2
    assert "`agent` is both a value and the table [agent]" in done.stderr
    assert 'write `name = "echo"` inside it' in done.stderr


def test_a_pinned_key_and_no_server_is_the_friendly_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    known = tmp_path / "known.json"
    known.write_text(json.dumps({url: {"jwk": {"kty": "EC", "kid": "k"}, "trusted": "now"}}))
    env = {**os.environ, "TAILAGENT_KNOWN_AGENTS": str(known)}
    done = tailagent("call", "hello", "--url", url, env=env)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"tailagent: nothing answers at {url}: start `tailagent serve`, or say where the "
        "agent is with --url"
    )
