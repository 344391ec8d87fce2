"""Nothing an agent, a caller or a peer writes acts on the owner's terminal.

One real server hosts tests/fake_acp_agent.py, whose `hostile` puts HOSTILE (a
clipboard write, a clear screen, a link, a window title, a C1 CSI, DEL, a bidi
override and rich markup) in a thought, a message, tool titles, input and output, a
file it writes in its worktree and a permission request. A tailnet peer's device is
named with a title change. The real CLI (`call`, `watch`, `tasks`, `diff`, `audit`,
`card`) runs piped, as a script sees it, and in a pseudo-terminal, as a person does:
no control character reaches either but rich's own colours, and each is shown in
its escaped form.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.a2a_helpers import A2A, Turn, user_message
from tests.conftest import RunningServer, start_server
from tests.fake_acp_agent import HOSTILE
from tests.tailnet import FakeTailscaled, whois
from tests.terminal import in_pty, plain
from tests.test_acp import agent_command
from tests.test_decisions import peer
from tests.test_isolation import make_project
from tests.warm_start import cli_run

# HOSTILE (tests/fake_acp_agent.py) as it must be shown: each control as its escape.
SHOWN = (
    r"clip \x1b]52;c;aGk=\x1b\ clear \x1b[2J link \x1b]8;;https://evil.example/\x1b\here"
    r"\x1b]8;;\x1b\ title \x1b]0;owned\x07 csi \x9b31m del \x7f bidi \u202etxt.exe\u202c "
    "markup [bold red]loud[/]"
)
# What a terminal acts on: C0 but newline and tab, DEL, C1, bidi marks and overrides,
# line and paragraph separators.
ACTING = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own colours, in a terminal only
ALICE_IP = "100.64.0.9"
DEVICE = "lap\x1b]0;owned\x07top"  # a device named to retitle the owner's window
CONFIG = """
name = "team \\u001b]52;c;aGk=\\u001b\\\\ [bold red]card[/]"

[access]
allowed_logins = ["alice@example.com"]
"""
WIDE = {"COLUMNS": "400"}  # table cells whole, so the escaped text is found in one piece


@dataclass
class Team:
    server: RunningServer
    tmp: Path


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    tmp = tmp_path_factory.mktemp("escapes")
    make_project(tmp / "workspace")
    fake = FakeTailscaled(tmp / "tailscaled").start()
    fake.peers[ALICE_IP] = whois("alice@example.com", name=DEVICE, ip=ALICE_IP)
    fake.write()
    config = tmp / "tailagent.toml"
    config.write_text(CONFIG)
    server = start_server(
        tmp,
        "--agent-command", agent_command(), "--config", str(config),
        "--isolation", "worktree", "--tailscale-socket", str(fake.socket),
    )  # fmt: skip
    yield Team(server, tmp)
    server.stop()
    fake.stop()


def tailagent(team: Team, *args: str) -> subprocess.CompletedProcess[str]:
    """A command of the owner's, piped (as a script or `| less` sees it)."""
    return cli_run(
        [sys.executable, "-m", "tailagent", *args, "--state-dir", str(team.server.state_dir)],
        capture_output=True, text=True, timeout=60,
        env={**os.environ, **WIDE, "TAILAGENT_KNOWN_AGENTS": str(team.tmp / "known.json")},
    )  # fmt: skip


def in_terminal(team: Team, *args: str) -> str:
    """A command of the owner's in a pseudo-terminal: what a person's terminal gets."""
    env = {**os.environ, **WIDE, "TERM": "xterm-256color"}
    argv = [sys.executable, "-m", "tailagent", *args, "--state-dir", str(team.server.state_dir)]
    return in_pty(argv, env).decode()


def assert_inert(*outputs: str) -> None:
    for output in outputs:
        acting = sorted(set(ACTING.findall(output)))
        assert not acting, f"{acting} reached the terminal in {output!r}"


def hostile_call(team: Team) -> tuple[subprocess.CompletedProcess[str], str, str]:
    """`tailagent call hostile`, which stops at the agent's permission request; with the
    task and request ids its reply command names."""
    called = tailagent(team, "call", "hostile")
    assert called.returncode == 3, called.stdout + called.stderr
    task = re.search(r"--task (\S+)", called.stdout)
    request = re.search(r"--request (\S+)", called.stdout)
    assert task and request, called.stdout
    return called, task.group(1), request.group(1)


async def hostile_task(team: Team) -> Turn:
    """The owner's `hostile` turn, sent over A2A, stopped at the agent's permission
    request: for the tests that only look at its task afterwards, sparing them a
    `tailagent call` run (~0.55 s of CPU)."""
    asked = await A2A(team.server.url, team.server.token).turn("hostile")
    assert asked.final_state == "input_required", asked.final_state
    return asked


def test_call_shows_the_agents_text_escaped_wherever_it_appears(team: Team) -> None:
    called, _task, _request = hostile_call(team)
    out = called.stdout
    assert_inert(out, called.stderr)
    for shown in (
        f"[thinking] thought {SHOWN}",
        f"said {SHOWN}",
        f"Read {SHOWN}",  # the tool's title
        f"output {SHOWN}",
        f"+file {SHOWN}",  # the edit's diff
        f"Run {SHOWN}",  # the permission request's title
    ):
        assert shown in out, (shown, out)


def test_in_a_terminal_only_tailagents_own_colours_are_sequences(team: Team) -> None:
    seen = in_terminal(team, "call", "hostile")
    assert SGR.search(seen), seen  # a terminal: rich colours it
    shown = plain(seen)
    assert_inert(shown)
    assert f"said {SHOWN}" in shown and f"Run {SHOWN}" in shown


async def test_watch_tasks_and_diff_show_it_escaped(team: Team) -> None:
    asked = await hostile_task(team)
    task = asked.task_id
    watched = tailagent(team, "watch", task)
    assert watched.returncode == 3, watched.stderr
    assert f"Run {SHOWN}" in watched.stdout, watched.stdout
    listed = tailagent(team, "tasks")
    assert listed.returncode == 0, listed.stderr
    # "says" is the status's first 60 characters, escaped.
    assert r"Run clip \x1b]52;c;aGk=\x1b\ clear \x1b[2J" in listed.stdout, listed.stdout
    diff = tailagent(team, "diff", asked.context_id)
    assert diff.returncode == 0, diff.stderr
    assert f"+file {SHOWN}" in diff.stdout, diff.stdout
    assert_inert(watched.stdout, watched.stderr, listed.stdout, diff.stdout, diff.stderr)
    assert_inert(plain(in_terminal(team, "watch", task)), plain(in_terminal(team, "tasks")))


async def test_audit_shows_reasons_and_devices_as_written(team: Team) -> None:
    alice = peer(team.server, ALICE_IP)
    asked = await alice.turn("hostile")
    assert asked.final_state == "input_required", asked.final_state
    denied = await alice.turn(
        user_message("no [/]", task_id=asked.task_id, context_id=asked.context_id)
    )
    assert denied.final_state == "completed", denied.final_state
    owned = await hostile_task(team)
    task, request = owned.task_id, owned.pending["requestId"]
    owners = tailagent(team, "call", "deny [bold green]x[/]", "--task", task, "--request", request)
    assert owners.returncode == 0, owners.stdout + owners.stderr
    audit = tailagent(team, "audit")
    assert audit.returncode == 0, audit.stdout + audit.stderr  # was: MarkupError, exit 1
    rows = {line for line in audit.stdout.splitlines() if asked.task_id[:8] in line}
    assert any("no [/]" in row and r"lap\x1b]0;owned\x07top" in row for row in rows), rows
    assert any(row for row in audit.stdout.splitlines() if "deny [bold green]x[/]" in row)
    assert r"clip \x1b]52;c;aGk=\x1b\ clear \x1b[2J" in audit.stdout  # the input, as asked
    assert_inert(audit.stdout, audit.stderr, plain(in_terminal(team, "audit")))
    as_json = tailagent(team, "audit", "--json")
    assert_inert(as_json.stdout)  # C1, DEL and bidi as \u escapes: JSON keeps them all
    by_task = {row["task_id"]: row for row in map(json.loads, as_json.stdout.splitlines())}
    assert by_task[asked.task_id]["reason"] == "no [/]"
    assert by_task[asked.task_id]["answered_by"].endswith(f"on {DEVICE}")
    assert by_task[task]["reason"] == "deny [bold green]x[/]" and HOSTILE in by_task[task]["input"]


def test_a_cards_own_words_are_shown_escaped(team: Team) -> None:
    shown = tailagent(team, "card", team.server.url)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert shown.stdout.startswith(r"team \x1b]52;c;aGk=\x1b\ [bold red]card[/]"), shown.stdout
    assert_inert(shown.stdout, plain(in_terminal(team, "card", team.server.url)))
