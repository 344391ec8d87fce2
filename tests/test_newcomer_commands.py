"""The commands around `call` as a newcomer meets them (issue 56): `budget set` with a
token's bare name, a title on each of `tasks`' rows, `clean --dry-run` beside a running
server, and a misspelt section in the config file. Each through the real CLI and a real
server, in an 80-column terminal.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import RunningServer, start_server
from tests.test_isolation import make_project
from tests.warm_start import cli_run

LONG = "fix the login page so that people who forgot their password can reset it by mail"


def tailagent(
    server: RunningServer, *args: str, columns: int = 80
) -> subprocess.CompletedProcess[str]:
    """A command of the person's on the server's box (which finds its local token)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILAGENT_")}
    env |= {"COLUMNS": str(columns), "LINES": "50", "TAILAGENT_STATE_DIR": str(server.state_dir)}
    return cli_run(
        [sys.executable, "-m", "tailagent", *args],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env,
    )  # fmt: skip


def test_budget_set_with_a_tokens_name_holds_that_token(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        made = tailagent(server, "token", "add", "ci", "--role", "caller")
        assert made.returncode == 0, made.stderr
        token = made.stdout.strip()
        given = tailagent(server, "budget", "set", "ci", "1")
        assert given.returncode == 0, given.stderr
        assert given.stderr.splitlines() == [
            "tailagent: ci is a token's name here, and a token's person is token:ci (a login "
            "has an @): the budget is token:ci's"
        ]
        assert given.stdout.startswith("token:ci: $1.00 a day, from their next task"), given
        listed = tailagent(server, "budget", "list")
        assert "token:ci: $1.00 a day (their own)" in listed.stdout.splitlines(), listed.stdout
        spent = tailagent(server, "call", "a big job cost:1.5", "--token", token)
        assert spent.returncode == 0, spent.stderr  # within the budget when it started
        held = tailagent(server, "call", "one more", "--token", token)
        assert held.returncode == 2, held
        assert "token:ci has spent $1.50 of $1.00 today (their own daily budget)" in held.stderr

        nobody = tailagent(server, "budget", "set", "nobody", "1")
        assert nobody.returncode == 2, nobody
        assert nobody.stderr.startswith(
            "tailagent: nobody is no login (a login has an @) and no token here is named so: "
            "a budget for it would hold no one"
        ), nobody.stderr
        assert "nobody" not in tailagent(server, "budget", "list").stdout
    finally:
        server.stop()


def task_lines(listed: subprocess.CompletedProcess[str], columns: int) -> list[str]:
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines and all(len(line) <= columns for line in lines), listed.stdout
    return lines


def test_tasks_show_each_ones_title(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        ids = {}
        for text in (LONG, "hello"):
            called = tailagent(server, "call", text)
            assert called.returncode == 0, called.stderr
            ids[text] = called.stdout.split()[1]
        # 80 columns: the ids whole on their row, the title on the line under it, first.
        lines = task_lines(tailagent(server, "tasks"), 80)
        assert lines[0].split() == ["task", "state", "updated", "context"], lines
        under = {line.split()[0]: lines[i + 1] for i, line in enumerate(lines[:-1])
                 if re.match(r"[0-9a-f-]{36} ", line)}  # fmt: skip
        assert under[ids["hello"]].rstrip() == "  hello", lines
        cut = under[ids[LONG]].rstrip()
        assert cut.endswith("…") and LONG.startswith(cut.strip()[:-1]), lines
        assert len(cut) > 40, lines  # the room the row leaves
        # Wide enough, the title is a column of its own.
        lines = task_lines(tailagent(server, "tasks", columns=200), 200)
        header = lines[0].split()
        assert header == ["task", "state", "updated", "context", "title", "says"], lines
        row = next(line for line in lines if line.startswith(ids[LONG]))
        start = lines[0].index("title")
        assert row[start:].startswith(LONG[:20]), row
    finally:
        server.stop()


def test_clean_dry_run_lists_beside_a_running_server(tmp_path: Path) -> None:
    make_project(tmp_path / "workspace")
    server = start_server(tmp_path, "--isolation", "worktree")
    stray = server.state_dir / "worktrees" / "left-by-hand"
    try:
        stray.mkdir(parents=True)
        listed = tailagent(server, "clean", "--dry-run")
        assert listed.returncode == 0, listed
        assert listed.stderr.startswith(f"tailagent: a server runs on {server.state_dir} (pid ")
        assert "a clean itself needs it stopped" in listed.stderr, listed.stderr
        assert listed.stdout.splitlines() == [
            "no conversation's:",
            f"  {stray}: a directory no record names",
        ]  # and not the running server's own worktree made ahead
        removing = tailagent(server, "clean", "--yes")
        assert removing.returncode == 2 and "stop it first" in removing.stderr, removing
        assert stray.is_dir()
    finally:
        server.stop()


def test_a_misspelt_section_gets_a_did_you_mean(tmp_path: Path) -> None:
    config = tmp_path / "tailagent.toml"
    config.write_text('[acess]\nallowed_logins = ["alice@example.com"]\n')
    started = cli_run(
        [sys.executable, "-m", "tailagent", "serve", "--agent", "echo", "--config", str(config),
         "--state-dir", str(tmp_path / "state"), "--listen", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip
    assert started.returncode == 2, started
    assert started.stderr.splitlines() == [
        f"tailagent: config error: {config}: [acess]: unknown section; did you mean [access]?"
    ]
