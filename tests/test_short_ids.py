"""Short ids lead where they were handed out (issue 43, item 1), through a real server
in a throwaway git repository and the real CLI at 80 columns.

`conversations`, `tasks` and `call`'s merge hint show 8-character ids. `call --context
8d12805e` once started a conversation whose id was `8d12805e` itself, hiding the real
one behind its own short id; `watch` and `cancel` took whole task ids only."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from a2a.utils.errors import TaskNotFoundError

from tailagent.bridge.conversations.names import START_NO_OTHER
from tests.a2a_helpers import A2A, user_message
from tests.conftest import RunningServer, start_server
from tests.postgres import postgres_missing, running_postgres
from tests.test_isolation import make_project

NARROW = {"COLUMNS": "80", "LINES": "50"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server on a person's fresh git project, each conversation on a branch."""
    tmp = tmp_path_factory.mktemp("short-ids")
    make_project(tmp / "workspace")
    server = start_server(tmp, "--isolation", "worktree")
    yield server
    server.stop()


def run(server: RunningServer, *args: str, token: str = "") -> subprocess.CompletedProcess[str]:
    """A command of the person's, in an 80-column terminal's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILAGENT_")}
    extra = ["--token", token] if token else []
    return subprocess.run(
        [sys.executable, "-m", "tailagent", *args, "--state-dir", str(server.state_dir), *extra],
        capture_output=True, text=True, timeout=60, env={**env, **NARROW},
    )  # fmt: skip


def ids_of(called: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    """The task and conversation `call` names on its first line: `task …  context …`."""
    match = re.match(r"task (\S+)  context (\S+)", called.stdout)
    assert match, called.stdout + called.stderr
    return match.group(1), match.group(2)


def someone(server: RunningServer) -> str:
    """A token for another person, who may call and approve: not an admin."""
    made = run(server, "token", "add", f"someone-{uuid.uuid4().hex[:6]}", "--role=caller",
               "--role=approver")  # fmt: skip
    assert made.returncode == 0, made.stderr
    return made.stdout.strip().splitlines()[-1]


def conversations(server: RunningServer, start: str) -> list[str]:
    """The ids of the caller's conversations that begin with `start`, as listed."""
    listed = run(server, "conversations", "--json")
    assert listed.returncode == 0, listed.stderr
    found = [json.loads(line)["contextId"] for line in listed.stdout.splitlines()]
    return sorted(c for c in found if c.startswith(start))


def test_call_context_with_the_short_id_goes_on_in_that_conversation(
    served: RunningServer,
) -> None:
    first = run(served, "call", "edit:notes.txt one")
    assert first.returncode == 0, first.stderr
    _, context_id = ids_of(first)
    short = context_id[:8]
    assert f"merge {short}" in first.stdout  # the short id the user is handed

    again = run(served, "call", "edit:more.txt two", "--context", short)
    assert again.returncode == 0, again.stderr
    assert ids_of(again)[1] == context_id  # was: a new conversation whose id is `short`
    assert f"changes on tailagent/{short} (+2 commits" in again.stdout, again.stdout
    assert conversations(served, short) == [context_id]  # was: and one named `short`
    diff = run(served, "diff", short)
    assert "+edit:notes.txt one" in diff.stdout and "+edit:more.txt two" in diff.stdout


def test_a_start_of_several_conversations_is_refused_naming_them(served: RunningServer) -> None:
    tag = uuid.uuid4().hex[:6]
    for name in ("one", "two"):
        made = run(served, "call", f"edit:{name}.txt {name}", "--context", f"{tag}-{name}")
        assert made.returncode == 0, made.stderr
    both = run(served, "call", "edit:three.txt three", "--context", tag)
    assert both.returncode == 2, both
    assert both.stderr.strip().endswith(
        f"{tag} is the start of 2 of your conversations ({tag}-one, {tag}-two): give more of its id"
    ), both.stderr
    assert conversations(served, tag) == [f"{tag}-one", f"{tag}-two"]  # none started
    more = run(served, "call", "hello", "--context", f"{tag}-t")
    assert more.returncode == 0, more.stderr
    assert ids_of(more)[1] == f"{tag}-two"


async def test_a_new_name_may_not_be_the_start_of_another_persons_id(
    served: RunningServer,
) -> None:
    mine = run(served, "call", "edit:mine.txt the admin's")
    _, context_id = ids_of(mine)
    short = context_id[:8]
    token = someone(served)
    # Through the CLI, and through any A2A client: the server holds every client to it.
    theirs = run(served, "call", "hello", "--context", short, token=token)
    assert theirs.returncode == 2, theirs
    assert theirs.stderr.strip().endswith(f"Conversation {short} not found{START_NO_OTHER}")
    with pytest.raises(TaskNotFoundError, match=re.escape(START_NO_OTHER)):
        await A2A(served.url, token).send(user_message("hello", context_id=short))
    assert conversations(served, short) == [context_id]  # the admin's, behind its short id
    assert "+edit:mine.txt the admin's" in run(served, "diff", short).stdout

    # A name that starts nobody's is theirs; its start then leads there, for them...
    tag = uuid.uuid4().hex[:6]
    made = run(served, "call", "edit:theirs.txt theirs", "--context", f"{tag}-theirs",
               token=token)  # fmt: skip
    assert made.returncode == 0, made.stderr
    went_on = await A2A(served.url, token).send(user_message("hello", context_id=tag))
    assert went_on.task.context_id == f"{tag}-theirs"
    # ...and for the admin, who may act on any conversation.
    admins = run(served, "call", "hello", "--context", tag)
    assert admins.returncode == 0, admins.stderr
    assert ids_of(admins)[1] == f"{tag}-theirs"


def test_a_short_id_goes_on_in_a_conversation_without_worktrees(server: RunningServer) -> None:
    first = run(server, "call", "hello")
    assert first.returncode == 0, first.stderr
    _, context_id = ids_of(first)
    again = run(server, "call", "hello again", "--context", context_id[:8])
    assert again.returncode == 0, again.stderr
    assert ids_of(again)[1] == context_id


@pytest.mark.skipif(postgres_missing() is not None, reason=postgres_missing() or "")
async def test_a_store_in_postgresql_finds_starts_the_same_way(tmp_path: Path) -> None:
    with running_postgres() as postgres:
        server = start_server(tmp_path, "--store", postgres.url)
        try:
            first = run(server, "call", "hello")
            _, context_id = ids_of(first)
            again = run(server, "call", "hello again", "--context", context_id[:8])
            assert again.returncode == 0, again.stderr
            assert ids_of(again)[1] == context_id
            with pytest.raises(TaskNotFoundError, match=re.escape(START_NO_OTHER)):
                message = user_message("hello", context_id=context_id[:8])
                await A2A(server.url, someone(server)).send(message)
        finally:
            server.stop()


async def test_watch_and_cancel_take_a_unique_start_of_a_task_id(served: RunningServer) -> None:
    asked = run(served, "call", "question")
    assert asked.returncode == 3, asked.stderr
    task_id, _ = ids_of(asked)
    watched = run(served, "watch", task_id[:8])
    assert watched.returncode == 3, watched.stderr
    assert "Which colour" in watched.stdout and f"task {task_id}" in watched.stdout
    canceled = run(served, "cancel", task_id[:8])
    assert canceled.returncode == 0, canceled.stderr
    assert canceled.stdout.strip() == f"task {task_id}: canceled"

    a2a = A2A(served.url, served.token)
    while True:  # until two of the caller's tasks begin alike
        firsts = Counter(t.id[0] for t in await a2a.list(page_size=100))
        start, count = firsts.most_common(1)[0]
        if count > 1:
            break
        await a2a.send("hello")
    for command in ("watch", "cancel"):
        several = run(served, command, start)
        assert several.returncode == 2, several
        assert f"tailagent: {start} is the start of {count} of your tasks (" in several.stderr
        assert several.stderr.strip().endswith("): give more of its id"), several.stderr
    unknown = run(served, "watch", "xyz")
    assert unknown.returncode == 2 and "Task not found" in unknown.stderr, unknown
