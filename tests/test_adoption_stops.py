"""A stop anywhere in a conversation's adoption of a worktree made ahead (issue 55): a
stop between its two record writes once left two records naming one directory, and
`tailagent clean --yes` then deleted the live conversation's directory as one made
ahead. Here a real server stops dead before each write point in turn (see
tests/stop_in_adoption.py), then the real `clean --yes` runs, and a real server
carries the conversation on."""

from __future__ import annotations

import json
import sys
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tailagent.workspace.conversation_repos.ending.holdings import clean, held
from tests.conftest import RunningServer, start_server
from tests.test_isolation import git, make_project
from tests.test_litter import wait_for_one_made_ahead
from tests.test_worktree_newcomer import completed, run, send_turn

STOPPER = Path(__file__).with_name("stop_in_adoption.py")
# The claim's record write and its rename, git's rev-parse, update-ref and
# symbolic-ref in the directory, the base shown there, the record written once the
# branch is made, and the adoption's end.
POINTS = 8


def records(state_dir: Path) -> list[dict[str, str]]:
    """Every record of a directory under the state dir's worktrees."""
    return [json.loads(r.read_text()) for r in sorted((state_dir / "worktrees").glob("*.json"))]


def conversations_dirs(state_dir: Path) -> set[Path]:
    """The directories a conversation's record names, and that are there."""
    found = {Path(r["path"]) for r in records(state_dir) if r["context_id"]}
    return {path for path in found if path.is_dir()}


@pytest.mark.parametrize("stop_at", range(1, POINTS + 2))
def test_a_stop_anywhere_in_an_adoption_leaves_clean_nothing_of_the_conversation(
    tmp_path: Path, stop_at: int
) -> None:
    repo = tmp_path / "workspace"
    make_project(repo)
    stopper = [sys.executable, "-P", str(STOPPER), str(stop_at)]
    server = start_server(tmp_path, "--isolation", "worktree", command=stopper)
    context = f"ctx-{uuid.uuid4().hex[:12]}"
    try:
        (ahead,) = wait_for_one_made_ahead(server.state_dir, repo)
        called = first_turn(server, context)
        stopped = server.process.wait(timeout=30) if stop_at <= POINTS else None
    finally:
        server.stop()
    passed = server.log().count("stop-in-adoption: point ")
    if stop_at > POINTS:  # no stop: the adoption passed every point, no more
        assert called == "TASK_STATE_COMPLETED" and passed == POINTS, server.log()
    else:
        assert stopped == 137 and f"stopped before point {stop_at} " in server.log()
        assert passed == stop_at - 1, server.log()

    # One record per directory at every stop: never one as made ahead and one as the
    # conversation's (clean would take the first's directory).
    paths = Counter(r["path"] for r in records(server.state_dir))
    assert [p for p, n in paths.items() if n > 1] == [], records(server.state_dir)
    theirs = conversations_dirs(server.state_dir)
    assert theirs <= {Path(ahead)}, theirs  # only the adopted directory is anyone's yet
    cleaned = run(server, "clean", "--yes")
    assert cleaned.returncode == 0, cleaned.stderr
    assert conversations_dirs(server.state_dir) == theirs, cleaned.stdout

    carried_on(tmp_path, server.state_dir, context)


def first_turn(server: RunningServer, context: str) -> str:
    """The conversation's first turn (an A2A client's: the CLI is not what is tested):
    its task's state, or "" when the server stopped dead before it answered."""
    try:
        task: dict[str, dict[str, str]] = send_turn(server, "edit:first.txt first", context)["task"]
    except httpx.TransportError:
        return ""
    return task["status"]["state"]


def carried_on(tmp_path: Path, state_dir: Path, context: str) -> None:
    """A real server carries the conversation on: its turn lands in its directory."""
    server = start_server(tmp_path, "--isolation", "worktree", state_dir=state_dir)
    try:
        completed(server, "edit:second.txt second", context)
        record = json.loads((state_dir / "worktrees" / f"{context}.json").read_text())
        directory = Path(record["path"])
        assert (directory / "second.txt").read_text() == "edit:second.txt second\n"
        assert "second" in git(directory, "log", "--format=%s", "-1").lower()
        assert_one_record_each(server)
    finally:
        server.stop()


def assert_one_record_each(server: RunningServer) -> None:
    """After a start, each directory has one record, and one under a made-ahead name is
    nobody's (a claim a stop cut short is finished at the start)."""
    paths = Counter(r["path"] for r in records(server.state_dir))
    assert max(paths.values()) == 1, records(server.state_dir)
    worktrees = server.state_dir / "worktrees"
    made_ahead = [json.loads(r.read_text()) for r in worktrees.glob("+ready-*.json")]
    assert [r for r in made_ahead if r["context_id"]] == []


def test_clean_takes_only_the_record_an_older_tailagent_left_of_an_adoption(
    tmp_path: Path,
) -> None:
    """The state an older tailagent's stop between its two writes left: the conversation's
    record and the made-ahead one name one directory. `clean` takes the second record
    only, and the conversation goes on."""
    repo = tmp_path / "workspace"
    make_project(repo)
    server = start_server(tmp_path, "--isolation", "worktree")
    context = f"ctx-{uuid.uuid4().hex[:12]}"
    try:
        completed(server, "edit:first.txt first", context)
    finally:
        server.stop()
    worktrees = server.state_dir / "worktrees"
    record = json.loads((worktrees / f"{context}.json").read_text())
    directory = Path(record["path"])
    leftover = worktrees / f"+ready-{uuid.uuid4().hex[:12]}.json"
    leftover.write_text(json.dumps(record | {"context_id": ""}))
    listed = run(server, "clean", "--dry-run")
    assert f"{leftover}: the record of a worktree made ahead that a conversation took" in (
        listed.stdout
    )
    cleaned = run(server, "clean", "--yes")
    assert cleaned.returncode == 0 and cleaned.stdout.endswith("removed 1\n"), cleaned.stdout
    assert not leftover.exists() and (directory / "first.txt").is_file()
    carried_on(tmp_path, server.state_dir, context)


def test_clean_leaves_a_made_ahead_directory_a_conversation_took_meanwhile(
    tmp_path: Path,
) -> None:
    """Listed by `clean` as made ahead, then taken before its removal: left."""
    root = tmp_path / "worktrees"
    (root / "+ready-1").mkdir(parents=True)
    made = {"path": str(root / "+ready-1"), "context_id": "", "repository": ""}
    (root / "+ready-1.json").write_text(json.dumps(made))
    listed = [h for h in held(root) if h.removable]
    assert [h.kind for h in listed] == ["made ahead"]
    (root / "+ready-1.json").rename(root / "ctx.json")
    (root / "ctx.json").write_text(json.dumps(made | {"context_id": "ctx", "idle": True}))
    assert clean(root, listed) == [] and (root / "+ready-1").is_dir()
