"""tailagent's own git on an agent's files cannot freeze it (issue 54, section 5).

An agent may make any file of its directory. A FIFO named `.gitignore` kept tailagent's
end-of-turn `git status` waiting for good while it held the lock every conversation
shares: another person's turn in her own conversation stayed `submitted`. Through a real
server with the hostile agent (tests/hostile_acp_agent.py), which acts on the system
directly: each special file is refused before git reads the tree, naming it, in Bob's turn
only; a git that does not finish by its deadline (a file of gigabytes) is stopped, in
Bob's turn only; and Alice's turn, started meanwhile in her own conversation, completes.
The deadline is the base's `tailagent.gitDeadline`, a few seconds here.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToDict

from tailagent.workspace.conversation_repos.plumbing.specials import special
from tailagent.workspace.git import GitError, Repository, git
from tests.a2a_helpers import A2A, Turn, texts
from tests.conftest import RunningServer, start_server
from tests.test_isolation import make_project
from tests.test_tokens_and_owners import add_token

HOSTILE = Path(__file__).parent / "hostile_acp_agent.py"
DEADLINE = 4  # seconds: the base's `tailagent.gitDeadline` in these tests
WITHIN = 30.0  # seconds any turn here may take, from its start to its end


@dataclass
class People:
    server: RunningServer
    alice: A2A
    bob: A2A


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> Iterator[People]:
    tmp = tmp_path_factory.mktemp("fence-git")
    workspace = tmp / "workspace"
    make_project(workspace, {"calc.py": "def add(a, b):\n    return a + b\n"})
    subprocess.run(["git", "-C", str(workspace), "config", "tailagent.gitDeadline",
                    str(DEADLINE)], check=True)  # fmt: skip
    command = f"{sys.executable} {HOSTILE}"
    server = start_server(tmp, "--agent-command", command, "--isolation", "worktree")
    try:
        alice = A2A(server.url, add_token(server, "alice", "caller", "approver"))
        bob = A2A(server.url, add_token(server, "bob", "caller", "approver"))
        yield People(server, alice, bob)
    finally:
        server.stop()


async def run(agent: A2A, *lines: str) -> tuple[Turn, dict[str, Any]]:
    """A turn in a new conversation whose agent runs `lines` in its directory; the turn
    and the worktree its end says (within WITHIN seconds, or the test fails)."""
    turn = await asyncio.wait_for(agent.turn(json.dumps({"run": list(lines)})), WITHIN)
    said = "".join(texts(a.artifact) for a in turn.artifacts("response"))
    assert all(v.startswith("ok") for v in json.loads(said[said.index("{") :]).values()), said
    metadata = MessageToDict((await agent.get(turn.task_id)).metadata)
    return turn, metadata.get("worktree", {})


async def alice_goes_on(people: People, bob: asyncio.Task[tuple[Turn, dict[str, Any]]]) -> None:
    """Alice's turn in her own conversation, started while Bob's runs, completes with its
    commit."""
    turn, worktree = await run(people.alice, "echo her work > alice.txt")
    assert turn.final_state == "completed"
    assert worktree["commit"] and worktree["files"] == ["alice.txt"], worktree
    assert not bob.done() or "error" in bob.result()[1]


@pytest.mark.parametrize("name", [".gitignore", ".gitattributes", "src/.gitignore"])
async def test_a_fifo_git_would_read_fails_its_own_turn_only(people: People, name: str) -> None:
    """Before: Bob's end-of-turn `git status` opened the FIFO and waited for good, holding
    the lock Alice's end-of-turn commit needed; neither turn ended (WITHIN fails it)."""
    made = f"mkdir -p {os.path.dirname(name) or '.'} && mkfifo {name}"
    bob = asyncio.create_task(run(people.bob, made, "echo his work > bob.txt"))
    await alice_goes_on(people, bob)
    turn, worktree = await bob
    error = worktree["error"]
    assert turn.final_state == "failed", error  # its own turn, saying why
    assert error in texts(turn.last_message)
    assert f"{name} in " in error and "FIFO" in error, error
    assert "ask the agent to remove" in error, error
    assert "commit" not in worktree


SOCKET = "import socket; socket.socket(socket.AF_UNIX).bind('app.sock')"


@pytest.mark.parametrize(
    ("made", "kind"),
    [
        ("mkdir -p deep/down && mkfifo deep/down/pipe", "FIFO"),
        (f'{sys.executable} -c "{SOCKET}"', "unix socket"),
    ],
)
async def test_a_special_file_anywhere_is_refused(people: People, made: str, kind: str) -> None:
    _, worktree = await run(people.bob, made)
    assert kind in worktree["error"], worktree
    assert "commit" not in worktree


async def test_a_git_past_its_deadline_is_stopped_and_blocks_nobody(people: People) -> None:
    """A sparse 5 GiB file: `git add` reads and deflates all of it (over a minute on a
    CI box), so Bob's end of turn meets the deadline; Alice's turn, started while it
    runs, completes before it, and Bob's ends by the deadline, saying so."""
    started = time.monotonic()
    bob = asyncio.create_task(run(people.bob, "truncate -s 5G big.bin"))
    await asyncio.sleep(1.0)  # Bob's agent is done: his end of turn is under way
    await alice_goes_on(people, bob)
    assert not bob.done(), "Alice waited for Bob's git"
    turn, worktree = await bob
    assert time.monotonic() - started < WITHIN
    assert turn.final_state == "failed"
    error = worktree["error"]
    assert f"did not finish within {DEADLINE} s" in error and "git add" in error, error
    leftover = worktree_of(people.server, turn.context_id)
    assert not (leftover / ".git" / "index.lock").exists()  # asked to stop, git cleaned up


def worktree_of(server: RunningServer, context_id: str) -> Path:
    record = server.state_dir / "worktrees" / f"{context_id}.json"
    return Path(json.loads(record.read_text())["path"])


# ---- git.py and the walk, directly ---------------------------------------------------------


async def test_a_stuck_git_and_what_it_started_are_ended(tmp_path: Path) -> None:
    """A git kept waiting (its excludes file a FIFO, named on the command line as no
    conversation can) ends at the call's deadline, its process group with it."""
    await git(tmp_path, "init", "-q")
    os.mkfifo(tmp_path / "pipe")
    repo = Repository(tmp_path / ".git", tmp_path).with_settings(
        ("core.excludesFile", str(tmp_path / "pipe"))
    )
    started = time.monotonic()
    with pytest.raises(GitError, match=r"git status in .* did not finish within 0.5 s"):
        await git(repo, "status", "--porcelain", deadline=0.5)
    assert time.monotonic() - started < 4
    left = await asyncio.to_thread(
        subprocess.run, ["pgrep", "-f", f"git --no-pager -C {tmp_path}"], capture_output=True
    )
    assert left.stdout == b""


def test_the_walk_reads_no_file_and_skips_git(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    os.mkfifo(tmp_path / ".git" / "guarded-elsewhere")  # plumbing/guard.py's to refuse
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "file").write_text("x")
    (tmp_path / "link").symlink_to("/dev/null")  # git stores a link's target's name
    assert special(tmp_path) is None
    (tmp_path / "a" / ".gitignore").symlink_to(tmp_path / ".git" / "guarded-elsewhere")
    assert special(tmp_path) == ("a/.gitignore", "FIFO (named pipe)")
