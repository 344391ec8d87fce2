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
from pathlib import Path

from tests.conftest import RunningServer, start_server
from tests.test_isolation import make_project

COLUMNS = 80
DEEP = "src/a-really-quite-long-directory-name/with/nested/parts/and-a-long-file-name.py"


def tailagent(server: RunningServer, *args: str) -> subprocess.CompletedProcess[str]:
    """A command of the person's, piped, in an 80-column terminal's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILAGENT_")}
    env |= {"COLUMNS": str(COLUMNS), "LINES": "50", "TAILAGENT_STATE_DIR": str(server.state_dir)}
    return subprocess.run(
        [sys.executable, "-m", "tailagent", *args],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env,
    )  # fmt: skip


def call(server: RunningServer, text: str, *args: str) -> str:
    """One turn; its task's id."""
    done = tailagent(server, "call", text, *args)
    assert done.returncode in (0, 3), done.stdout + done.stderr  # 3: it waits for input
    found = re.search(r"^task (\S+)", done.stdout, re.M)
    assert found is not None, done.stdout
    return found.group(1)


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


def test_conversations_keep_ids_whole_and_wrap_a_long_file_name(tmp_path: Path) -> None:
    make_project(tmp_path / "workspace")
    server = start_server(tmp_path, "--isolation", "worktree")
    try:
        call(server, f"edit:{DEEP} deep", "--context", "deep")
        for name in ("one", "two"):
            call(server, f"edit:{name}.txt {name}")
        listed = tailagent(server, "conversations")
        assert listed.returncode == 0, listed.stderr
        lines = fits(listed.stdout)
        assert lines[0].split() == ["conversation", "branch", "+/-", "state", "files"], lines
        rows = [line.split() for line in lines[1:] if line[:1].strip()]
        assert len(rows) == 3, listed.stdout
        for row in rows:  # whole, and each what `diff` takes
            assert len(row[0]) >= 8 or row[0] == "deep", row
            assert row[1:5] == [f"tailagent/{row[0]}", "+1/-0", "changes", "to"], row
            assert tailagent(server, "diff", row[0]).returncode == 0
        # The long name is whole, its pieces one under the other in the files column.
        assert DEEP in "".join(column(lines, "files")), listed.stdout
        assert "one.txt" in column(lines, "files") and "two.txt" in column(lines, "files")
    finally:
        server.stop()


def test_tasks_keep_the_context_and_state_whole(tmp_path: Path) -> None:
    make_project(tmp_path / "workspace")
    server = start_server(tmp_path, "--isolation", "worktree")
    try:
        edited = call(server, "edit:notes.txt notes")
        # Its branch takes the name's first 8 characters; the next one's, 40 of its own.
        call(server, "edit:first.txt first", "--context", "a-conversation-of-mine")
        long = "a-conversation-named-at-length-by-its-owner"
        named = call(server, "edit:second.txt second", "--context", long)
        waiting = call(server, "ask")
        listed = tailagent(server, "tasks")
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
        assert tailagent(server, "diff", long[:40]).returncode == 0
        row = next(line for line in lines if line.startswith(edited))
        context = row.split()[3]
        assert len(context) == 8, listed.stdout  # the short id its branch shows
        conversations = tailagent(server, "conversations")
        shorts = [line.split()[0] for line in fits(conversations.stdout)[1:] if line[:1].strip()]
        assert context in shorts and long[:40] in shorts, conversations.stdout
        diffed = tailagent(server, "diff", context)
        assert diffed.returncode == 0 and "+edit:notes.txt notes" in diffed.stdout, diffed
    finally:
        server.stop()


def test_another_repositorys_conversations_are_one_line(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    make_project(first / "workspace")
    make_project(second / "workspace")
    state = tmp_path / "state"
    server = start_server(first, "--isolation", "worktree", state_dir=state)
    try:
        for name in ("one", "two", "three"):
            call(server, f"edit:{name}.txt {name}")
        call(server, "hello, nothing changed")  # never had a branch: not counted
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
        call(server, "edit:here.txt here", "--context", "here-and-now")
        listed = tailagent(server, "conversations")
        lines = fits(listed.stdout)
        assert [line.split()[0] for line in lines[1:]] == ["here-and"], listed.stdout
        assert "".join(fits(listed.stderr)).startswith("and 3 with a branch in "), listed
    finally:
        server.stop()
