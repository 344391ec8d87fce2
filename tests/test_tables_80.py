"""`tailagent conversations` and `tailagent tasks` in an 80-column terminal: every line
fits, the ids a person types back (a conversation's short id, a task's id) are whole,
a long file name wraps inside its column, and a state dir that served another
repository before says so in one line instead of a "cannot be read" cell per
conversation of it.

All through real servers in worktree mode on scratch repositories and the real CLI.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.a2a_helpers import A2A, user_message
from tests.conftest import RunningServer, start_server
from tests.test_isolation import make_project
from tests.test_short_ids import person, project_server
from tests.warm_start import cli_run

COLUMNS = 80
DEEP = "src/a-really-quite-long-directory-name/with/nested/parts/and-a-long-file-name.py"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One server on a fresh project for the tests whose tables are one person's own:
    each test is its own person (`person`), so it lists only what it made."""
    yield from project_server(tmp_path_factory, "tables")


def tailagent(
    server: RunningServer, *args: str, token: str = ""
) -> subprocess.CompletedProcess[str]:
    """A command of the person's, piped, in an 80-column terminal's environment: the
    local token's, or `token`'s."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILAGENT_")}
    env |= {
        "COLUMNS": str(COLUMNS),
        "LINES": "50",
        "TAILAGENT_STATE_DIR": str(server.state_dir),
    }
    extra = ["--token", token] if token else []
    return cli_run(
        [sys.executable, "-m", "tailagent", *args, *extra],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env,
    )  # fmt: skip


async def call(server: RunningServer, text: str, context_id: str = "", token: str = "") -> str:
    """One turn, sent as `call` sends it by an A2A client in this process (the tables
    are what is tested, not the call); its task's id."""
    a2a = A2A(server.url, token or server.token)
    done = await a2a.turn(user_message(text, context_id=context_id))
    assert done.final_state in ("completed", "input_required"), done.kinds()
    return done.task_id


def fits(out: str) -> list[str]:
    lines = out.splitlines()
    assert lines and all(len(line) <= COLUMNS for line in lines), out
    return lines


def column(lines: list[str], header: str) -> list[str]:
    """Each line's text in the column `header` heads (from its start to the line's end,
    or to the next column's start), stripped: a wrapped cell's pieces, line by line."""
    start = lines[0].index(header)
    after = [m.start() for m in re.finditer(r"(?<=  )\S", lines[0]) if m.start() > start]
    end = after[0] if after else None
    return [line[start:end].strip() for line in lines]


async def test_conversations_keep_ids_whole_and_wrap_a_long_file_name(
    served: RunningServer,
) -> None:
    token = person(served)
    await call(served, f"edit:{DEEP} deep", context_id="deep", token=token)
    for name in ("one", "two"):
        await call(served, f"edit:{name}.txt {name}", token=token)
    listed = tailagent(served, "conversations", token=token)
    assert listed.returncode == 0, listed.stderr
    lines = fits(listed.stdout)
    assert lines[0].split() == ["conversation", "branch", "+/-", "state", "files"], lines
    rows = [line.split() for line in lines[1:] if line[:1].strip()]
    assert len(rows) == 3, listed.stdout
    for row in rows:  # whole, and each what `diff` takes
        assert len(row[0]) >= 8 or row[0] == "deep", row
        assert row[1:5] == [f"tailagent/{row[0]}", "+1/-0", "changes", "to"], row
        assert tailagent(served, "diff", row[0], token=token).returncode == 0
    # The long name is whole, its pieces one under the other in the files column.
    assert DEEP in "".join(column(lines, "files")), listed.stdout
    assert "one.txt" in column(lines, "files") and "two.txt" in column(lines, "files")


async def test_tasks_keep_the_context_and_state_whole(served: RunningServer) -> None:
    token = person(served)
    edited = await call(served, "edit:notes.txt notes", token=token)
    # Its branch takes the name's first 8 characters; the next one's, 40 of its own.
    await call(served, "edit:first.txt first", context_id="a-conversation-of-mine", token=token)
    long = "a-conversation-named-at-length-by-its-owner"
    named = await call(served, "edit:second.txt second", context_id=long, token=token)
    waiting = await call(served, "ask", token=token)
    listed = tailagent(served, "tasks", token=token)
    assert listed.returncode == 0, listed.stderr
    lines = fits(listed.stdout)
    row = next(line for line in lines if line.startswith(waiting))
    assert row.split()[1] == "input-required", listed.stdout
    assert len(row.split()[3]) == 8, listed.stdout  # its id's start: no branch yet
    # The long short id wraps in its column: all of it there, in order, none cut.
    at = next(i for i, line in enumerate(lines) if line.startswith(named))
    pieces = column(lines, "context")[at : at + 3]
    assert "".join(pieces) == long[:40], listed.stdout
    assert all(len(piece) >= 8 for piece in pieces[:-1]), pieces
    assert tailagent(served, "diff", long[:40], token=token).returncode == 0
    row = next(line for line in lines if line.startswith(edited))
    context = row.split()[3]
    assert len(context) == 8, listed.stdout  # the short id its branch shows
    conversations = tailagent(served, "conversations", token=token)
    shorts = [line.split()[0] for line in fits(conversations.stdout)[1:] if line[:1].strip()]
    assert context in shorts and long[:40] in shorts, conversations.stdout
    diffed = tailagent(served, "diff", context, token=token)
    assert diffed.returncode == 0 and "+edit:notes.txt notes" in diffed.stdout, diffed


async def test_another_repositorys_conversations_are_one_line(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    make_project(first / "workspace")
    make_project(second / "workspace")
    state = tmp_path / "state"
    server = start_server(first, "--isolation", "worktree", state_dir=state)
    try:
        for name in ("one", "two", "three"):
            await call(server, f"edit:{name}.txt {name}")
        await call(server, "hello, nothing changed")  # never had a branch: not counted
    finally:
        server.stop()
    server = start_server(second, "--isolation", "worktree", state_dir=state)
    try:
        listed = tailagent(server, "conversations")
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout == "", listed.stdout
        first_line, *wrapped = fits(listed.stderr)
        assert first_line == "no conversations of yours with a branch on this agent"
        said = "".join(wrapped)  # wrapped at spaces: each line keeps its last one
        assert "cannot be read" not in listed.stderr
        assert said == (
            f"and 3 with a branch in {first / 'workspace'}, served before from this state "
            "dir: serve it (--cwd) to see, merge or discard them"
        ), listed.stderr
        # This repository's own conversation is a row, the others still one line.
        await call(server, "edit:here.txt here", context_id="here-and-now")
        listed = tailagent(server, "conversations")
        lines = fits(listed.stdout)
        assert [line.split()[0] for line in lines[1:]] == ["here-and"], listed.stdout
        assert "".join(fits(listed.stderr)).startswith("and 3 with a branch in "), listed
    finally:
        server.stop()
