"""A repository of its own per conversation, through a real server and the real CLI.

The workspace is a throwaway git repository; the echo agent's `edit:PATH` really
writes files in the directory its conversation works in. What a person would check
is checked with git itself: the main checkout, the branches, the trailers. A
conversation's branch lives in its directory's own repository (`git -C <its directory>`),
and the person's repository gets nothing of it until a merge.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToDict

from tests.a2a_helpers import A2A, user_message
from tests.conftest import RunningServer, start_server
from tests.warm_start import cli_run


def git(repo: Path, *args: str) -> str:
    """git as the test reads a repository; a conversation's belongs to its agent's uid
    when the server is root, which git's ownership check would refuse to the test."""
    done = subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(repo), *args], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def make_project(repo: Path, files: dict[str, str] | None = None) -> None:
    """A person's project at `repo`: a git repository on `main`, one commit holding a
    README (and `files`), committed as Dev."""
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.name", "Dev")
    git(repo, "config", "user.email", "dev@example.com")
    for name, text in {**(files or {}), "README.md": "a project\n"}.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "start")


def attempt(repo: Path, *args: str) -> int:
    """A git command that may fail (a merge that stops on conflicts)."""
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True).returncode


def snapshot(repo: Path) -> dict[str, str]:
    """Every file's hash in the main checkout, its status and its branches (all the
    person's: a conversation's `tailagent/…` branch is in its own repository)."""
    files = {
        str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
    return {
        **files,
        "(status)": git(repo, "status", "--porcelain"),
        "(refs)": git(repo, "for-each-ref"),
    }


@pytest.fixture(scope="module")
def repo_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningServer, Path]]:
    """One server for the module's tests: each works in conversations of its own and
    looks at those alone, so none needs a server of its own (a start costs ~1.7 s of CPU)."""
    tmp = tmp_path_factory.mktemp("isolation")
    repo = tmp / "workspace"
    make_project(repo, {"calc.py": "def add(a, b):\n    return a - b\n"})
    server = start_server(tmp, "--isolation", "worktree")
    yield server, repo
    server.stop()


def cli(server: RunningServer, *args: str) -> subprocess.CompletedProcess[str]:
    return cli_run(
        [sys.executable, "-m", "tailagent", *args, "--state-dir", str(server.state_dir)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def worktree_path(state_dir: Path, branch: str) -> Path:
    """The directory (and repository) of the conversation whose branch is `branch`, as
    its record in the state dir says (`git worktree list` no longer lists it: it is a
    repository of its own, not a worktree of the person's)."""
    records = sorted((state_dir / "worktrees").glob("*.json"))
    for record in records:
        data = json.loads(record.read_text())
        if data["branch"] == branch:
            return Path(data["path"])
    raise AssertionError(f"no conversation has {branch}: {records}")


def task_rows(listing: str) -> dict[str, str]:
    """`tailagent tasks`: each task's id -> its row and the lines under it (its title,
    what it changed), each line with its newline."""
    rows: dict[str, str] = {}
    task = ""
    for line in listing.splitlines()[1:]:  # under the header
        if not line.startswith(" "):
            task = line.split()[0]
        rows[task] = rows.get(task, "") + line + "\n"
    return rows


async def test_two_conversations_do_not_see_each_others_changes(
    repo_server: tuple[RunningServer, Path],
) -> None:
    server, repo = repo_server
    before = snapshot(repo)
    a2a = A2A(server.url, server.token)
    first, second = await asyncio.gather(
        a2a.turn("edit:notes.txt from the first"), a2a.turn("edit:notes.txt from the second")
    )
    assert first.final_state == second.final_state == "completed"
    assert snapshot(repo) == before  # the person's checkout is untouched
    assert "isolation: each conversation in a repository" in server.log()
    trees, branches = {}, {}
    for turn in (first, second):
        task = await a2a.get(turn.task_id)
        info = MessageToDict(task.metadata).get("worktree") or {}
        assert info["ahead"] == 1 and info["files"] == ["notes.txt"], info
        branch = branches[turn.task_id] = info["branch"]
        trees[branch] = git(worktree_path(server.state_dir, branch), "show", f"{branch}:notes.txt")
    listed = await asyncio.to_thread(cli, server, "tasks")
    rows = task_rows(listed.stdout)  # the server's other tasks are other tests'
    for task_id, branch in branches.items():  # each task's conversation, as its branch names it
        assert f"  {branch.removeprefix('tailagent/')}\n" in rows[task_id], listed.stdout
        assert rows[task_id].count("[+1 commit, notes.txt]") == 1, listed.stdout
    assert sorted(trees.values()) == ["edit:notes.txt from the first\n",
                                      "edit:notes.txt from the second\n"]  # fmt: skip


async def test_a_commit_names_who_asked_and_who_allowed(
    repo_server: tuple[RunningServer, Path],
) -> None:
    server, repo = repo_server
    a2a = A2A(server.url, server.token)
    asked = await a2a.turn("ask edit")
    pending = asked.pending
    done = await a2a.turn(
        user_message(
            task_id=asked.task_id,
            context_id=asked.context_id,
            data={
                "kind": "permission_response",
                "decision": "allow",
                "requestId": pending["requestId"],
            },
        )
    )
    assert done.final_state == "completed"
    branch = "tailagent/" + asked.context_id[:8]
    own = worktree_path(server.state_dir, branch)
    trailers = git(own, "log", "-1", "--format=%(trailers)", branch)
    assert "Requested-by: token:local" in trailers
    assert "Approved-by: token:local: Bash" in trailers
    assert f"A2A-Task: {asked.task_id}" in trailers
    assert f"A2A-Context: {asked.context_id}" in trailers
    assert git(own, "log", "-1", "--format=%s", branch).strip() == "ask edit"
    assert git(repo, "branch", "--list", "tailagent/*") == ""  # not in the person's


async def test_merge_refuses_a_dirty_base_then_squashes_and_removes_the_branch(
    repo_server: tuple[RunningServer, Path],
) -> None:
    server, repo = repo_server
    a2a = A2A(server.url, server.token)
    turn = await a2a.turn("edit")
    (repo / "README.md").write_text("my own work in progress\n")
    before = snapshot(repo)
    refused = cli(server, "merge", turn.context_id, "--yes")
    assert refused.returncode != 0
    assert "README.md" in refused.stderr
    assert snapshot(repo) == before
    git(repo, "checkout", "--", "README.md")
    merged = cli(server, "merge", turn.context_id, "--yes")
    assert merged.returncode == 0, merged.stderr
    assert "merged (squash) into main" in merged.stdout
    assert (repo / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    message = git(repo, "log", "-1", "--format=%B", "main")
    assert "edit" in message and "Requested-by: token:local" in message
    assert "tailagent/" not in git(repo, "branch", "--list", "tailagent/*")


async def test_a_conflict_leaves_the_base_as_it_was_and_says_what_to_do(
    repo_server: tuple[RunningServer, Path],
) -> None:
    server, repo = repo_server
    a2a = A2A(server.url, server.token)
    first, second = await asyncio.gather(
        a2a.turn("edit:notes.txt from the first"), a2a.turn("edit:notes.txt from the second")
    )
    assert cli(server, "merge", first.context_id, "--yes").returncode == 0
    before = snapshot(repo)
    conflict = cli(server, "merge", second.context_id, "--yes")
    assert conflict.returncode != 0
    assert "notes.txt" in conflict.stderr and "rebase" in conflict.stderr
    assert snapshot(repo) == before
    # What the agent would do when asked to rebase and resolve (echo has no shell), in
    # the conversation's worktree (one made ahead keeps the name it was made under).
    task = await a2a.get(second.task_id)
    branch = MessageToDict(task.metadata)["worktree"]["branch"]
    worktree = worktree_path(server.state_dir, branch)
    attempt(worktree, "merge", "-q", "main")  # conflicts, as the agent would find
    (worktree / "notes.txt").write_text("both, resolved\n")
    git(worktree, "add", "notes.txt")
    git(worktree, "commit", "-q", "-m", "resolve")
    again = cli(server, "merge", second.context_id, "--yes")
    assert again.returncode == 0, again.stderr
    assert (repo / "notes.txt").read_text() == "both, resolved\n"


async def test_discard_says_what_is_lost_and_removes_it(
    repo_server: tuple[RunningServer, Path],
) -> None:
    server, repo = repo_server
    a2a = A2A(server.url, server.token)
    turn = await a2a.turn("edit:draft.txt a draft")
    asked = cli(server, "discard", turn.context_id)  # no terminal, no --yes: nothing happens
    assert asked.returncode == 2 and "draft" in asked.stdout
    own = worktree_path(server.state_dir, "tailagent/" + turn.context_id[:8])
    assert git(own, "branch", "--list", "tailagent/*").strip()  # in its own repository
    gone = cli(server, "discard", turn.context_id, "--yes")
    assert gone.returncode == 0, gone.stderr
    assert not git(repo, "branch", "--list", "tailagent/*").strip()
    assert not own.exists()


async def test_bad_requests_get_one_line_and_change_nothing(
    repo_server: tuple[RunningServer, Path],
) -> None:
    server, repo = repo_server
    a2a = A2A(server.url, server.token)
    context_id = f"wip-{uuid.uuid4().hex[:12]}"
    # Long enough for the refusal of a merge of it while it runs, asked first, to meet it
    # running on a loaded box (a CLI run there takes seconds).
    slow = user_message("edit:wip.txt slow 6", context_id=context_id)
    long_turn = asyncio.create_task(a2a.turn(slow))
    record = server.state_dir / "worktrees" / f"{context_id}.json"
    for _ in range(100):  # until the conversation's worktree exists
        if record.exists():
            break
        await asyncio.sleep(0.1)
    assert record.exists(), sorted((server.state_dir / "worktrees").iterdir())
    before = snapshot(repo)
    for args, words in (
        (("merge", context_id), "is running task"),
        (("merge", "no-such-conversation"), "Conversation no-such-conversation not found"),
        (("diff", "no-such-conversation"), "Conversation no-such-conversation not found"),
    ):
        done = await asyncio.to_thread(cli, server, *args)
        assert done.returncode == 2, done
        assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr, done.stderr
    # Another caller: a conversation that is not theirs, and a merge without the role.
    for roles, words in ((("caller", "approver"), "not found"), (("caller",), "not found")):
        name = f"other-{len(roles)}"
        token = cli(server, "token", "add", name, *(f"--role={r}" for r in roles)).stdout
        theirs = await asyncio.to_thread(
            cli, server, "merge", context_id, "--yes", "--token", token.strip().splitlines()[-1]
        )
        assert theirs.returncode == 2 and words in theirs.stderr, theirs.stderr
    assert snapshot(repo) == before
    assert (await long_turn).final_state == "completed"
    diff = await asyncio.to_thread(cli, server, "diff", context_id)
    assert "+edit:wip.txt slow 6" in diff.stdout


def test_a_workspace_that_is_not_a_repository_runs_shared(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--isolation", "worktree")
    try:
        assert "isolation: shared" in server.log()
        assert "not a git repository" in server.log()
    finally:
        server.stop()
