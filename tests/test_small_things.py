"""Small things a newcomer met in the first hour (issue 43, item 8), each through the
real CLI and, where it takes one, a real server on a scratch git repository: a bare
`tailagent`, a misspelt command, commands that need tailscaled on a box without it,
the audit's identity, `--json` where a script wants it, a card named by HOST:PORT,
a config file with several mistakes, an unknown `TAILAGENT_*` variable, `keys init`
after the first start."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailagent.card.keys import KEYS_FILE
from tests.a2a_helpers import A2A, state_name
from tests.conftest import SERVING, START_TIMEOUT, RunningServer, start_server
from tests.warm_start import cli_run


def tailagent(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return cli_run(
        [sys.executable, "-m", "tailagent", *args],
        capture_output=True, text=True, timeout=60,
        env={**(env or os.environ), "COLUMNS": "80"},
    )  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server on a git repository, on a box whose tailscaled is not there."""
    tmp = tmp_path_factory.mktemp("small")
    workspace = tmp / "workspace"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    subprocess.run(
        ["git", "-C", str(workspace), "-c", "user.name=t", "-c", "user.email=t@example.com",
         "commit", "-q", "--allow-empty", "-m", "start"],
        check=True,
    )  # fmt: skip
    running = start_server(tmp, "--tailscale-socket", str(tmp / "no-tailscaled.sock"))
    yield running
    assert running.stop() == 0, running.log()


def test_a_bare_tailagent_prints_the_help_and_a_misspelt_command_the_one_meant() -> None:
    bare = tailagent()
    assert bare.returncode == 0, bare.stderr
    assert "usage: tailagent" in bare.stdout and "serve" in bare.stdout and "doctor" in bare.stdout
    typo = tailagent("cal", "hello")
    assert typo.returncode == 2
    assert "did you mean `tailagent call`?" in typo.stderr, typo.stderr
    assert "'completion'" not in typo.stderr  # not argparse's list of all twenty


def test_tasks_limit_0_is_refused_before_asking_any_server() -> None:
    # Nothing listens on port 9: a refusal that asked would say "nothing answers".
    refused = tailagent("tasks", "--limit", "0", "--url", "http://127.0.0.1:9")
    assert refused.returncode == 2
    assert "--limit: 0 is not a positive count" in refused.stderr, refused.stderr


def test_tasks_merge_and_discard_help_say_their_own_exit_codes() -> None:
    assert "3 input-required" in tailagent("call", "--help").stdout
    for command in ("tasks", "merge", "discard"):
        shown = tailagent(command, "--help").stdout
        assert "exit codes: 0" in shown, (command, shown)
        assert "input-required (the reply" not in shown, (command, shown)
    assert "no --yes without a terminal" in tailagent("merge", "--help").stdout


def test_tailnet_and_peers_without_tailscaled_say_to_start_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-tailscaled.sock")
    serve = tailagent(
        "serve", "--agent", "echo", "--tailnet", "--listen", "127.0.0.1:0",
        "--state-dir", str(tmp_path / "state"), "--cwd", str(tmp_path),
        "--tailscale-socket", missing,
    )  # fmt: skip
    assert serve.returncode == 1
    assert "--tailnet needs tailscaled" in serve.stderr, serve.stderr
    assert "start tailscaled (sudo systemctl start tailscaled)" in serve.stderr
    assert "--tsnet" in serve.stderr
    peers = tailagent("peers", "--tailscale-socket", missing)
    assert peers.returncode == 2
    assert "start tailscaled (sudo systemctl start tailscaled)" in peers.stderr, peers.stderr


def test_the_audit_names_who_answered_not_why_tailscaled_was_not_asked(
    served: RunningServer,
) -> None:
    where = ["--state-dir", str(served.state_dir)]
    asked = tailagent("call", "ask:rm", *where)
    assert asked.returncode == 3, asked.stderr
    [allow] = [line.strip() for line in asked.stdout.splitlines() if "call allow" in line]
    words = allow.split()
    answered = tailagent(*words[words.index("call") :])
    assert answered.returncode == 0, answered.stderr
    task = re.search(r"--task (\S+)", allow)  # the start of its id, as `call` prints it
    assert task is not None
    audit = tailagent("audit", "--json", *where)
    rows = map(json.loads, audit.stdout.splitlines())
    [row] = [r for r in rows if r["task_id"].startswith(task[1])]
    assert row["answered_by"] == "token:local (bearer token, local connection)"
    assert "LocalAPI" not in tailagent("audit", *where).stdout


def test_token_list_keys_card_and_diff_speak_json(served: RunningServer) -> None:
    where = ["--state-dir", str(served.state_dir)]
    assert tailagent("token", "add", "ci", *where).returncode == 0
    tokens = [
        json.loads(line)
        for line in tailagent("token", "list", "--json", *where).stdout.split("\n")
        if line
    ]
    assert {t["name"]: t["roles"] for t in tokens} == {
        "local": ["caller", "approver", "admin"],
        "ci": ["caller"],
    }
    key = json.loads(tailagent("keys", "show", "--json", *where).stdout)
    assert key["alg"] == "ES256" and key["path"] == str(served.state_dir / "signing-keys.json")
    # HOST:PORT alone: http on this box.
    host_port = served.url.removeprefix("http://").rstrip("/")
    card = tailagent("card", host_port, "--json")
    assert card.returncode == 0, card.stderr
    shown = json.loads(card.stdout)
    assert shown["url"] == f"http://{host_port}" and shown["card"]["name"] == "tailagent"
    assert shown["signature"].startswith("valid"), shown["signature"]
    edit = tailagent("call", "edit a.txt", *where)
    assert edit.returncode == 0, edit.stderr
    context = re.search(r"context (\S+)", edit.stdout)
    assert context is not None
    diff = tailagent("diff", context[1][:8], "--json", *where)
    assert diff.returncode == 0, diff.stderr
    change = json.loads(diff.stdout)
    assert change["context"] == context[1]
    assert change["diff"].startswith("diff --git"), change


def test_keys_init_after_the_first_start_says_alg_applies_only_before(
    served: RunningServer,
) -> None:
    keys = served.state_dir / KEYS_FILE  # read as it is: `keys show` is not what is tested
    before = keys.read_bytes()
    again = tailagent("keys", "init", "--alg", "EdDSA", "--state-dir", str(served.state_dir))
    assert again.returncode == 1
    assert "applies only before" in again.stderr and "keys rotate" in again.stderr, again.stderr
    assert keys.read_bytes() == before  # nothing was replaced


def test_a_config_file_with_several_mistakes_names_each(tmp_path: Path) -> None:
    config = tmp_path / "tailagent.toml"
    config.write_text('listen = "0.0.0.0:1"\nmax_body_bytes = -1\nlog_levl = "info"\n')
    started = tailagent("serve", "--config", str(config), "--state-dir", str(tmp_path / "s"))
    assert started.returncode == 2
    lines = started.stderr.splitlines()
    assert len(lines) == 3, started.stderr
    assert all(line.startswith(f"tailagent: config error: {config}: ") for line in lines)
    assert "listen: refusing to listen on 0.0.0.0:1" in lines[0]
    assert "max_body_bytes:" in lines[1]
    assert "log_levl: unknown key; did you mean 'log_level'?" in lines[2]


def test_an_unknown_tailagent_variable_is_named_at_start(tmp_path: Path) -> None:
    env = {**os.environ, "TAILAGENT_LISTN": "127.0.0.1:1", "TAILAGENT_TOKEN": "ta_x"}
    log_path = tmp_path / "server.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "tailagent", "serve", "--agent", "echo", "--listen",
             "127.0.0.1:0", "--state-dir", str(tmp_path / "state"), "--cwd", str(tmp_path)],
            stdout=log, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not SERVING.search(log_path.read_text()) and time.monotonic() < deadline:
            assert process.poll() is None, log_path.read_text()
            time.sleep(0.05)
    finally:
        process.terminate()
        process.wait(timeout=15)
    said = log_path.read_text()
    assert SERVING.search(said), said
    assert (
        "TAILAGENT_LISTN is no tailagent setting, ignored; did you mean TAILAGENT_LISTEN?" in said
    )
    assert "TAILAGENT_TOKEN" not in said  # one tailagent reads, though no setting


def test_an_agent_command_of_yours_is_not_said_to_come_through_npx(tmp_path: Path) -> None:
    """The start line's npx note is for a preset npx fetches, not `--agent-command`."""
    from tests.test_acp import start_acp

    server = start_acp(tmp_path)
    try:
        started = [line for line in server.log().splitlines() if "starting the agent:" in line]
    finally:
        server.stop()
    assert len(started) == 1 and "fake_acp_agent.py" in started[0], started
    assert "npx" not in started[0]
    assert "agent.start_timeout allows" in started[0]


def test_a_first_ctrl_c_on_a_terminal_says_the_task_goes_on_without_it(
    served: RunningServer,
) -> None:
    """On a terminal, one Ctrl-C offers to cancel; left alone, `call` says the task goes
    on without this terminal, and it does."""
    import pty
    import signal

    main, child = pty.openpty()  # stdin a terminal: the first Ctrl-C only offers
    env = {**os.environ, "COLUMNS": "80", "TAILAGENT_STATE_DIR": str(served.state_dir)}
    calling = subprocess.Popen(
        [sys.executable, "-m", "tailagent", "call", "slow 20", "--url", served.url],
        stdin=child, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    os.close(child)
    try:
        assert calling.stdout is not None
        header = calling.stdout.readline()  # "task <id>  context <id>": the task exists
        task = header.split()[1]
        calling.send_signal(signal.SIGINT)
        _out, said = calling.communicate(timeout=60)
    finally:
        calling.kill()
        os.close(main)
    assert f"otherwise the task goes on without this terminal (`tailagent watch {task}`" in said
    assert f"task {task} goes on without this terminal" in said
    state = asyncio.run(state_then_cancel(served, task))
    assert state in ("working", "completed"), state  # not canceled


async def state_then_cancel(server: RunningServer, task_id: str) -> str:
    """The task's state, read in-process (the CLI is not what is looked at); a task still
    working is then canceled, so it does not hold the shared server."""
    a2a = A2A(server.url, server.token)
    state = state_name((await a2a.get(task_id)).status.state)
    if state == "working":
        await a2a.cancel(task_id)
    return state
