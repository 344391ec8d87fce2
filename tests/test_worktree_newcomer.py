"""Worktrees that explain themselves, as a newcomer meets them (issue 34, items 7, 9-12):
a real `tailagent serve` in a throwaway git repository, the real CLI at 80 columns, and
git itself to check what is left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import tailagent
from tailagent.bridge.conversations.workplace import first_start
from tests.conftest import RunningServer, start_server
from tests.terminal import in_pty, plain
from tests.test_isolation import git, make_project
from tests.warm_start import cli_run

NARROW = {"COLUMNS": "80", "LINES": "50"}
TIME = r"(\d\d-\d\d )?\d\d:\d\d"
FIRST_START = "is a git repository: each conversation that changes files gets a branch"


def run(server: RunningServer, *args: str) -> subprocess.CompletedProcess[str]:
    """A command of the person's, piped, in an 80-column terminal's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILAGENT_")}
    return cli_run(
        [sys.executable, "-m", "tailagent", *args, "--state-dir", str(server.state_dir)],
        capture_output=True, text=True, timeout=60, env={**env, **NARROW},
    )  # fmt: skip


def send_turn(
    server: RunningServer, text: str = "", context: str = "", **fields: Any
) -> dict[str, Any]:
    """One message as any A2A client sends it (JSON-RPC SendMessage, answered when its
    turn ends), with `fields` added to the message (`data`, `taskId`): its result, a
    task or a message. For a turn a test only makes to look at later: a `tailagent
    call` would cost a process (~0.5 s of CPU) and test nothing it asserts."""
    parts: list[dict[str, Any]] = [{"text": text}] if text else []
    if "data" in fields:
        parts.append({"data": fields.pop("data")})
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "contextId": context,
               "parts": parts, **fields}  # fmt: skip
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {server.token}"}
    answer = httpx.post(server.url + "/", json=body, headers=headers, timeout=120).json()
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


def completed(server: RunningServer, text: str, context: str = "") -> dict[str, Any]:
    """A turn through `send_turn` that must complete: its task."""
    task: dict[str, Any] = send_turn(server, text, context)["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    return task


def in_terminal(server: RunningServer, *args: str) -> str:
    """A command of the person's in an 80-column pseudo-terminal, colours taken out."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    argv = [sys.executable, "-m", "tailagent", *args, "--state-dir", str(server.state_dir)]
    return plain(in_pty(argv, {**env, "TERM": "xterm-256color"}, columns=80))


def records(state_dir: Path, repo: Path) -> list[dict[str, object]]:
    """The records of the conversations (and those made ahead) of `repo` in the state dir."""
    found = [json.loads(r.read_text()) for r in sorted((state_dir / "worktrees").glob("*.json"))]
    return [r for r in found if Path(str(r["repository"])) == (repo / ".git").resolve()]


def branches(state_dir: Path, repo: Path) -> list[str]:
    """The `tailagent/…` branches of `repo`'s conversations: each in the conversation's own
    repository (the person's has none: checked here too)."""
    assert git(repo, "branch", "--list", "tailagent/*") == ""
    found = []
    for record in records(state_dir, repo):
        path = Path(str(record["path"]))
        if path.is_dir() and record["context_id"]:  # not one made ahead
            found += git(
                path, "branch", "--list", "--format=%(refname:short)", "tailagent/*"
            ).split()
    return found


def made_ahead(state_dir: Path, repo: Path) -> list[str]:
    """The directories made ahead for `repo` and not taken yet: detached, under the state
    dir (each a repository of its own, not a worktree `git worktree list` shows)."""
    return [
        str(record["path"])
        for record in records(state_dir, repo)
        if str(record["context_id"]) == ""
        and Path(str(record["path"])).is_dir()
        and git(Path(str(record["path"])), "branch", "--show-current").strip() == ""
    ]


def context_of(called: subprocess.CompletedProcess[str]) -> str:
    """The conversation `call` names on its first line: `task …  context …`."""
    match = re.search(r"context (\S+)", called.stdout)
    assert match, called.stdout + called.stderr
    return match.group(1)


def record(server: RunningServer, context_id: str) -> dict[str, object]:
    return dict(json.loads((server.state_dir / "worktrees" / f"{context_id}.json").read_text()))


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[RunningServer, Path]]:
    repo = tmp_path / "workspace"
    make_project(repo)
    server = start_server(tmp_path, "--isolation", "worktree")
    yield server, repo
    server.stop()


def test_hellos_leave_no_branch_and_their_conversations_go_on(tmp_path: Path) -> None:
    repo = tmp_path / "workspace"
    make_project(repo)
    server = start_server(tmp_path, "--isolation", "worktree")
    try:
        first_log = server.log()
        hellos = [completed(server, "hello")["contextId"] for _ in range(3)]
        assert branches(server.state_dir, repo) == []  # was: one tailagent/… branch per hello
        went_on = hellos[0]
        completed(server, "edit:notes.txt went on", went_on)
        assert branches(server.state_dir, repo) == [f"tailagent/{went_on[:8]}"]
        own = Path(str(record(server, went_on)["path"]))
        assert git(own, "show", f"tailagent/{went_on[:8]}:notes.txt") == "edit:notes.txt went on\n"
    finally:
        server.stop()
    assert FIRST_START in first_log and "--cwd DIR" in first_log
    assert "--isolation shared" in first_log

    server = start_server(tmp_path, "--isolation", "worktree")  # the same state dir
    try:
        assert FIRST_START not in server.log()  # said once for this repository
        idle = hellos[1]
        assert not Path(str(record(server, idle)["path"])).exists()  # gone at the start
        completed(server, "edit:later.txt later", idle)
        own = Path(str(record(server, idle)["path"]))
        assert git(own, "show", f"tailagent/{idle[:8]}:later.txt") == "edit:later.txt later\n"
        assert sorted(branches(server.state_dir, repo)) == sorted([f"tailagent/{went_on[:8]}",
                                                 f"tailagent/{idle[:8]}"])  # fmt: skip
    finally:
        server.stop()


def test_the_first_start_in_tailagents_own_checkout_says_so(tmp_path: Path) -> None:
    checkout = Path(tailagent.__file__).resolve().parents[1]
    said = first_start(checkout, tmp_path / "worktrees")
    assert said.startswith(f"{checkout} is tailagent's own checkout: each conversation")
    assert "a git repository" in first_start(tmp_path, tmp_path / "worktrees")


def test_diff_merge_and_discard_take_the_short_id_of_the_branch(
    project: tuple[RunningServer, Path],
) -> None:
    server, repo = project
    for context, text in (("abc-one", "edit:notes.txt one"), ("abc-two", "edit:other.txt two")):
        completed(server, text, context)
    diff = run(server, "diff", "abc-o")
    assert diff.returncode == 0, diff.stderr
    assert "+edit:notes.txt one" in diff.stdout and "other.txt" not in diff.stdout
    ambiguous = run(server, "merge", "abc")
    assert ambiguous.returncode == 2
    assert ambiguous.stderr.strip().endswith(
        "abc is the start of 2 of your conversations (abc-one, abc-two): give more of its id"
    ), ambiguous.stderr
    token = run(server, "token", "add", "someone", "--role=caller", "--role=approver")
    theirs = run(server, "diff", "abc-o", "--token", token.stdout.strip())
    assert theirs.returncode == 2 and "Conversation abc-o not found" in theirs.stderr

    merged = run(server, "merge", "abc-o", "--yes")
    assert merged.returncode == 0, merged.stderr
    commit = git(repo, "rev-parse", "main").strip()
    # What it brings is said first (from git), then that it merged.
    shown, done = merged.stdout.split("\n merged", 1)[0], merged.stdout.splitlines()[-1]
    assert shown.startswith("tailagent/abc-one (1 commit) would bring into main:\n"), shown
    assert " notes.txt  +1 -0\n 1 file changed, +1 -0" in merged.stdout
    assert done.startswith(f"merged (squash) into main as {commit[:12]}"), merged.stdout
    again = run(server, "merge", "abc-o", "--yes")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"already merged into main at {commit[:12]} (tailagent/abc-one")

    listed = run(server, "conversations")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    # One commit of its own, one behind main since abc-one was merged.
    assert rows["abc-two"][:4] == ["abc-two", "tailagent/abc-two", "+1/-1", "changes"]
    assert "other.txt" in rows["abc-two"] and "behind" in listed.stdout
    assert rows["abc-one"][2:5] == ["+0/-0", "merged", "at"], listed.stdout
    assert all(len(line) <= 80 for line in listed.stdout.splitlines())

    tasks = run(server, "tasks")
    contexts = [line.split()[3] for line in tasks.stdout.splitlines()[1:] if "completed" in line]
    assert sorted(contexts) == ["abc-one", "abc-two"], tasks.stdout


def test_tasks_and_audit_fit_80_columns_and_keep_the_time(
    project: tuple[RunningServer, Path],
) -> None:
    server, _repo = project
    asked = run(server, "call", "question")
    assert asked.returncode == 3, asked.stderr
    hello = completed(server, "hello")
    permission = send_turn(server, "ask")["task"]
    assert permission["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", permission
    task = permission["id"]
    why = "no, run pytest -x instead, the build folder holds the release notes of today"
    denied = run(server, "call", why, "--task", task)
    assert denied.returncode == 0, denied.stderr

    listed = run(server, "tasks")
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["task", "state", "updated", "context"], lines[0]
    assert all(len(line) <= 80 for line in lines), listed.stdout
    waiting = next(i for i, line in enumerate(lines) if "input-required" in line)
    assert re.fullmatch(rf"\S{{36}}  input-required  {TIME}\s+\S{{8}}", lines[waiting].rstrip())
    # Under it, its title, then what it asks, whole.
    assert lines[waiting + 1].strip() == "question", listed.stdout
    assert lines[waiting + 2].strip() == "Which colour do you prefer?", listed.stdout
    assert hello["contextId"][:8] in listed.stdout

    audit = in_terminal(server, "audit")
    rows = audit.splitlines()
    assert all(len(line) <= 80 for line in rows), audit
    deny = next(line for line in rows if " deny " in line)
    assert re.match(rf"\s*{TIME}\s+deny\s+Bash\s+rm -rf build\s", deny), deny
    assert task[:8] in deny
    assert "release notes of today" in " ".join(" ".join(rows).split())  # wrapped, not cut


def test_switching_cwd_on_a_state_dir_says_so_once(tmp_path: Path) -> None:
    first, second = tmp_path / "workspace", tmp_path / "other"
    make_project(first)
    make_project(second)
    server = start_server(tmp_path, "--isolation", "worktree")
    try:
        done = completed(server, "edit:notes.txt kept")["contextId"]
        deadline = time.monotonic() + 30
        while not made_ahead(server.state_dir, first) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        server.stop(signal.SIGKILL)  # killed: its worktree made ahead is left behind
    assert made_ahead(server.state_dir, first)  # one for the next conversation, of the first

    logs = []
    for _ in range(2):
        server = start_server(tmp_path, "--isolation", "worktree", "--cwd", str(second))
        server.stop()
        logs.append(server.log())
    common = first / ".git"
    assert f"removed a worktree made ahead for the repository at {common}" in logs[0]
    assert (
        f"1 conversation of the repository at {common} (served before from this state dir): "
        f"left alone while {second} is served" in logs[0]
    ), logs[0]
    assert "conversation 's" not in logs[0] + logs[1]
    assert "made ahead" not in logs[1] and "conversation of the" not in logs[1], logs[1]
    assert not made_ahead(server.state_dir, first)
    assert branches(server.state_dir, first) == [f"tailagent/{done[:8]}"]  # kept
