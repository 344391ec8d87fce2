"""What tailagent leaves in a person's repository and state dir (issue 43, item 2): a
real `tailagent serve` in a throwaway git repository, the real CLI at 80 columns, and
git itself to say what is left."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import start_server
from tests.test_acp import start_acp
from tests.test_isolation import git, make_project
from tests.test_worktree_newcomer import NARROW, branches, completed, made_ahead, run


def task_of(output: str) -> str:
    """The task `call` names on its first line: `task …  context …`."""
    match = re.search(r"task (\S+)", output)
    assert match, output
    return match.group(1)


def only_main(repo: Path) -> None:
    """The person's repository has its own checkout and no branch of tailagent's."""
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(repo, "branch", "--list", "tailagent/*") == ""


def wait_for_one_made_ahead(state_dir: Path, repo: Path) -> list[str]:
    deadline = time.monotonic() + 30
    while not (ahead := made_ahead(state_dir, repo)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return ahead


def test_a_turn_that_ends_with_nothing_ahead_leaves_no_branch_however_it_ended(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "workspace"
    make_project(repo)
    config = tmp_path / "tailagent.toml"
    config.write_text("max_permission_denials = 1\n")
    server = start_server(tmp_path, "--isolation", "worktree", "--config", str(config))
    try:
        failed = run(server, "call", "boom")
        assert failed.returncode == 1 and "[failed] boom" in failed.stdout, failed.stderr

        slow = subprocess.Popen(
            [sys.executable, "-m", "tailagent", "call", "slow 30",
             "--state-dir", str(server.state_dir)],
            stdout=subprocess.PIPE, text=True, env={**NARROW, "PATH": "/usr/bin:/bin"},
        )  # fmt: skip
        assert slow.stdout is not None
        first = slow.stdout.readline()
        assert slow.stdout.readline().startswith("! Started from main at ")  # a new one
        while (line := slow.stdout.readline()).startswith("  "):  # the start, wrapped
            pass
        assert line.startswith("tick 1/30")  # its turn is under way
        cancelled = run(server, "cancel", task_of(first))
        assert cancelled.returncode == 0, cancelled.stderr
        assert "[canceled]" in slow.communicate(timeout=30)[0]

        asked = run(server, "call", "ask")
        assert asked.returncode == 3, asked.stdout + asked.stderr  # input-required
        refused = run(server, "call", "deny", "--task", task_of(asked.stdout))
        assert refused.returncode == 1 and "Stopped: 1 permission denials" in refused.stdout

        assert branches(server.state_dir, repo) == []  # was: tailagent/… of the cancelled one
        only_main(repo)
        listed = run(server, "conversations")
        assert "and 3 that changed nothing (no branch)" in listed.stderr, listed.stderr

        kept = run(server, "call", "edit:notes.txt kept boom")  # failed after a change
        assert kept.returncode == 1, kept.stderr
        assert len(branches(server.state_dir, repo)) == 1  # what it changed is kept
    finally:
        server.stop()


def test_an_agent_without_its_login_leaves_no_branch(tmp_path: Path) -> None:
    repo = tmp_path / "workspace"
    make_project(repo)
    server = start_acp(tmp_path, "--auth-required")  # worktrees: the default
    try:
        for _ in range(2):
            called = run(server, "call", "hello")
            assert called.returncode == 1 and "needs a login" in called.stdout, called.stdout
        assert branches(server.state_dir, repo) == []
        only_main(repo)
        assert len(wait_for_one_made_ahead(server.state_dir, repo)) == 1
    finally:
        server.stop()


def test_the_worktree_made_ahead_lives_while_its_repository_is_served(tmp_path: Path) -> None:
    repo = tmp_path / "workspace"
    make_project(repo)
    server = start_server(tmp_path, "--isolation", "worktree")
    try:
        for _ in range(3):  # three conversations (an A2A client's: the CLI is not tested)
            completed(server, "hello")
        assert len(ahead := wait_for_one_made_ahead(server.state_dir, repo)) == 1
        busy = run(server, "clean", "--yes")
        assert busy.returncode == 2 and "stop it first" in busy.stderr, busy.stderr
    finally:
        server.stop()
    assert made_ahead(server.state_dir, repo) == [] and not Path(ahead[0]).exists()  # clean stop

    server = start_server(tmp_path, "--isolation", "worktree")
    left = wait_for_one_made_ahead(server.state_dir, repo)
    server.stop(signal.SIGKILL)  # a killed server cannot remove its own
    assert made_ahead(server.state_dir, repo) == left
    doctor = run(server, "doctor").stdout.splitlines()
    at = doctor.index("✓ worktrees: 3 idle, 1 made ahead")
    assert doctor[at + 1] == "  1 no conversation's: `tailagent clean` removes them"
    assert doctor[at + 2] == f"  in {server.state_dir / 'worktrees'}:"
    assert f"    {Path(left[0]).name}: made ahead for the next conversation" in doctor[at + 3 :]

    listed = run(server, "clean", "--dry-run")
    assert listed.returncode == 0 and left[0] in listed.stdout, listed.stderr
    asked = run(server, "clean")  # piped: it does not ask
    assert asked.returncode == 2 and "add --yes" in asked.stderr
    assert made_ahead(server.state_dir, repo) == left
    cleaned = run(server, "clean", "--yes")
    assert cleaned.returncode == 0 and cleaned.stdout.endswith("removed 1\n"), cleaned.stdout
    assert made_ahead(server.state_dir, repo) == [] and not Path(left[0]).exists()
    assert "3 idle" in run(server, "doctor").stdout  # the conversations' are kept

    server = start_server(tmp_path, "--isolation", "worktree")
    left = wait_for_one_made_ahead(server.state_dir, repo)
    server.stop(signal.SIGKILL)
    server = start_server(tmp_path, "--isolation", "worktree")  # removes what a kill left
    try:
        now = wait_for_one_made_ahead(server.state_dir, repo)
        assert len(now) == 1 and now != left and not Path(left[0]).exists()
        only_main(repo)
    finally:
        server.stop()
