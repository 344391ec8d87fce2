"""What a person reads of a turn's change after the turn: `tailagent call` prints the
turn's commit (the agent's reports only of files it does not hold, labelled), and the
task lists (`tailagent tasks`, the desk's rows) and `tailagent conversations` say when
a branch was merged or discarded since, instead of the `+1 commit` the turn's end
wrote. A branch kept after its squash has nothing left to merge, and its dry run says so.

All through a real server in worktree mode and the real CLI, in an 80-column terminal.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.conftest import RunningServer, start_server
from tests.test_desk_access import signin_link
from tests.test_isolation import git
from tests.test_worktree_newcomer import completed, send_turn
from tests.warm_start import cli_run

CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
COLUMNS = 80
HEX12 = "[0-9a-f]{12}"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, Path]]:
    tmp = tmp_path_factory.mktemp("branch-fates")
    repo = tmp / "workspace"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "calc.py").write_text(CALC)
    (repo / ".gitignore").write_text("*.log\n")  # what the agent writes there is not committed
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-qm", "start")
    server = start_server(tmp, "--isolation", "worktree")
    yield server, repo
    server.stop()


def tailagent(server: RunningServer, *args: str) -> subprocess.CompletedProcess[str]:
    """A command of the person's, piped, in an 80-column terminal's environment."""
    env = {**os.environ, "COLUMNS": str(COLUMNS), "LINES": "50",
           "TAILAGENT_STATE_DIR": str(server.state_dir)}  # fmt: skip
    return cli_run(
        [sys.executable, "-m", "tailagent", *args],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env,
    )  # fmt: skip


def call(server: RunningServer, text: str, context: str) -> tuple[str, str]:
    """One turn in `context`: its output and its task's id."""
    done = tailagent(server, "call", text, "--context", context)
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.search(r"^task (\S+)", done.stdout, re.M)
    assert found is not None, done.stdout
    return done.stdout, found.group(1)


def turn(server: RunningServer, text: str, context: str) -> str:
    """One turn in `context` where its output is not what is tested (an A2A client's,
    not a `tailagent call` process): its task's id."""
    task_id: str = completed(server, text, context)["id"]
    return task_id


def discard(server: RunningServer, context: str) -> None:
    """Drops a test's conversation when it is done with it (an A2A client's request, as
    the CLI's `discard --yes` sends it)."""
    send_turn(server, context=context, data={"kind": "discard"})


def rows(server: RunningServer) -> dict[str, str]:
    """`tailagent tasks` in 80 columns: task id -> what its row says (under it, after
    its title's line)."""
    listed = tailagent(server, "tasks", "--limit", "50")
    assert listed.returncode == 0, listed.stderr
    said: dict[str, str] = {}
    task = ""
    for line in listed.stdout.splitlines():
        assert len(line) <= COLUMNS, line
        if match := re.match(r"([0-9a-f-]{36}) ", line):
            task = match.group(1)
            said.setdefault(task, "")
        elif task and line.startswith("  "):
            said[task] = line.strip()  # the last line: its title's comes first
    return said


def test_call_prints_the_turn_commit_and_only_what_it_lacks_as_reported(
    project: tuple[RunningServer, Path],
) -> None:
    server, _ = project
    context = f"out-{uuid.uuid4().hex[:6]}"
    out, _ = call(server, "edit edit:build/out.log built", context)
    lines = out.splitlines()
    assert all(len(line) <= COLUMNS for line in lines), out
    (head,) = [line for line in lines if line.startswith("[calc.py")]
    assert re.fullmatch(rf"\[calc\.py \+1 -1\] committed in {HEX12}", head), out
    at = lines.index(head)
    assert lines[at + 1].startswith("@@ "), out  # git's header lines are not repeated
    assert "-    return a - b" in lines and "+    return a + b" in lines
    # Ignored by git: the agent reported it, the commit does not hold it.
    assert "[build/out.log +1 -0] reported by the agent" in lines, out
    assert "+edit edit:build/out.log built" in lines
    assert not any(line.startswith("[calc.py") and "reported" in line for line in lines)
    assert out.index("committed in") < out.index("[completed]"), out

    # A path longer than the terminal keeps its end, and the head line fits.
    deep = "/".join(["a-rather-long-directory-name"] * 4) + "/notes.txt"
    out, _ = call(server, f"edit:{deep} deep", context)
    (head,) = [line for line in out.splitlines() if "notes.txt +1 -0]" in line]
    assert head.startswith("[…") and len(head) <= COLUMNS, head
    assert re.search(rf"directory-name/notes\.txt \+1 -0\] committed in {HEX12}$", head), head
    discard(server, context)


def test_task_rows_say_merged_or_discarded_once_the_branch_went(
    project: tuple[RunningServer, Path],
) -> None:
    server, _ = project
    tag = uuid.uuid4().hex[:4]
    merged, dropped, kept = (f"{word}-{tag}" for word in ("mrg", "drp", "kpt"))
    merged_task = turn(server, "edit:m.txt merged", merged)
    dropped_task = turn(server, "edit:d.txt dropped", dropped)
    before = rows(server)
    assert before[merged_task].startswith("[+1 commit, m.txt]"), before
    assert before[dropped_task].startswith("[+1 commit, d.txt]"), before

    assert tailagent(server, "merge", merged, "--yes").returncode == 0
    assert tailagent(server, "discard", dropped, "--yes").returncode == 0
    after = rows(server)
    assert after[merged_task].startswith("[merged]"), after
    assert after[dropped_task].startswith("[discarded]"), after
    listed = tailagent(server, "tasks", "--json", "--limit", "50").stdout.splitlines()
    states = {t["id"]: t["metadata"]["worktree"].get("state") for t in map(json.loads, listed)}
    assert (states[merged_task], states[dropped_task]) == ("merged", "discarded")

    # Kept after its squash: nothing is left to merge, and everything says so.
    kept_task = turn(server, "edit:k.txt kept", kept)
    assert tailagent(server, "merge", kept, "--yes", "--keep").returncode == 0
    again = tailagent(server, "merge", kept, "--yes")
    said = again.stdout + again.stderr
    assert f"nothing to merge: main already has every change on tailagent/{kept}" in said, said
    assert "would bring" not in said
    assert rows(server)[kept_task].startswith("[merged]")
    conversations = tailagent(server, "conversations", "--json").stdout.splitlines()
    (row,) = [r for r in map(json.loads, conversations) if r["contextId"] == kept]
    assert row["state"] == "merged, kept: nothing new to merge", row
    # A new turn on the kept branch (the same branch) has something to merge again: its
    # task's row says so, the merged one's still says merged.
    next_task = turn(server, "edit:k.txt kept, then changed", kept)
    now = rows(server)
    assert now[kept_task].startswith("[merged]"), now
    assert re.match(r"\[\+2 commits, (1 behind, )?k\.txt\]", now[next_task]), now
    shown = tailagent(server, "merge", kept)
    assert "would bring into main" in shown.stdout and " k.txt " in shown.stdout, shown.stdout
    discard(server, kept)


def test_the_desk_rows_say_merged_or_discarded(
    project: tuple[RunningServer, Path], browser: Browser
) -> None:
    server, _ = project
    tag = uuid.uuid4().hex[:4]
    merged, dropped, live = (f"{word}-{tag}" for word in ("dm", "dd", "dl"))
    tasks = {
        name: turn(server, f"edit:{name}.txt {name}", name) for name in (merged, dropped, live)
    }
    assert tailagent(server, "merge", merged, "--yes").returncode == 0
    assert tailagent(server, "discard", dropped, "--yes").returncode == 0
    page = browser.new_context().new_page()
    page.goto(signin_link(server))
    row = {name: page.locator(f'li.row[data-task="{task}"]') for name, task in tasks.items()}
    expect(row[merged].locator(".change")).to_have_text("merged")
    expect(row[dropped].locator(".change")).to_have_text("discarded")
    expect(row[live].locator(".change")).to_have_text(f"1 commit · {live}.txt")
    assert tailagent(server, "discard", live, "--yes").returncode == 0
    page.reload()  # a discard moves no task: the list still says it at the next view
    expect(row[live].locator(".change")).to_have_text("discarded")
    page.context.close()


def test_a_conversation_goes_on_after_its_discard_in_a_fresh_branch(
    project: tuple[RunningServer, Path],
) -> None:
    """A discard removes the worktree its agent session worked in: the next turn of the
    conversation works (and commits) in its new worktree, not in the removed one, where
    its edit would be lost."""
    server, _repo = project
    context = str(uuid.uuid4())
    first, _ = call(server, "edit:after_discard.py", context)
    assert re.search(rf"committed in {HEX12}", first), first
    discarded = tailagent(server, "discard", context[:8], "--yes")
    assert discarded.returncode == 0, discarded.stdout + discarded.stderr
    again, _ = call(server, "edit:after_discard.py", context)
    assert re.search(rf"committed in {HEX12}", again), again
    diff = tailagent(server, "diff", context[:8])
    assert diff.returncode == 0 and "+++ b/after_discard.py" in diff.stdout, diff.stdout
