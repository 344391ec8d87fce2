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
from a2a.types.a2a_pb2 import ListTasksRequest, Message
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict

from tailagent.access.tokens import TokenStore
from tests.a2a_helpers import A2A, Turn, texts, user_message
from tests.conftest import RunningServer, start_server
from tests.postgres import postgres_missing, running_postgres
from tests.test_isolation import make_project
from tests.warm_start import cli_run

NARROW = {"COLUMNS": "80", "LINES": "50"}


def project_server(factory: pytest.TempPathFactory, name: str) -> Iterator[RunningServer]:
    """A server on a person's fresh git project, each conversation on a branch."""
    tmp = factory.mktemp(name)
    make_project(tmp / "workspace")
    server = start_server(tmp, "--isolation", "worktree")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from project_server(tmp_path_factory, "short-ids")


def run(server: RunningServer, *args: str, token: str = "") -> subprocess.CompletedProcess[str]:
    """A command of the person's, in an 80-column terminal's environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILAGENT_")}
    extra = ["--token", token] if token else []
    return cli_run(
        [sys.executable, "-m", "tailagent", *args, "--state-dir", str(server.state_dir), *extra],
        capture_output=True, text=True, timeout=60, env={**env, **NARROW},
    )  # fmt: skip


def ids_of(called: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    """The task and conversation `call` names on its first line: `task …  context …`."""
    match = re.match(r"task (\S+)  context (\S+)", called.stdout)
    assert match, called.stdout + called.stderr
    return match.group(1), match.group(2)


def person(server: RunningServer) -> str:
    """A token for another person, who may call and approve: not an admin. Made as
    `tailagent token add` makes it, in this process: the command is not what is tested."""
    name = f"someone-{uuid.uuid4().hex[:6]}"
    return TokenStore(server.state_dir).add(name, ("caller", "approver"))


async def turn(server: RunningServer, text: str, token: str = "", context_id: str = "") -> Turn:
    """A turn that only makes what a test then looks at, sent as `call` sends it (one
    streamed message) by an A2A client in this process."""
    a2a = A2A(server.url, token or server.token)
    return await a2a.turn(user_message(text, context_id=context_id))


async def conversations(server: RunningServer, start: str) -> list[str]:
    """The ids of the admin's conversations that begin with `start`: the contexts of
    all their tasks, page by page."""
    found: set[str] = set()
    async with A2A(server.url, server.token).client() as client:
        request = ListTasksRequest(page_size=100, history_length=0)
        while True:
            page = await client.list_tasks(request)
            found.update(t.context_id for t in page.tasks if t.context_id.startswith(start))
            if not page.next_page_token:
                return sorted(found)
            request.page_token = page.next_page_token


async def test_call_context_with_the_short_id_goes_on_in_that_conversation(
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
    assert await conversations(served, short) == [context_id]  # was: and one named `short`
    diff = run(served, "diff", short)
    assert "+edit:notes.txt one" in diff.stdout and "+edit:more.txt two" in diff.stdout


async def test_a_start_of_several_conversations_is_refused_naming_them(
    served: RunningServer,
) -> None:
    tag = uuid.uuid4().hex[:6]
    for name in ("one", "two"):
        made = await turn(served, f"edit:{name}.txt {name}", context_id=f"{tag}-{name}")
        assert made.final_state == "completed", made.kinds()
    both = run(served, "call", "edit:three.txt three", "--context", tag)
    assert both.returncode == 2, both
    assert both.stderr.strip().endswith(
        f"{tag} is the start of 2 of your conversations ({tag}-one, {tag}-two): give more of its id"
    ), both.stderr
    assert await conversations(served, tag) == [f"{tag}-one", f"{tag}-two"]  # none started
    more = run(served, "call", "hello", "--context", f"{tag}-t")
    assert more.returncode == 0, more.stderr
    assert ids_of(more)[1] == f"{tag}-two"


def same_words(refusal: str, name: str, other: str) -> str:
    """`refusal` as it would read for `other`: what is left to compare once the name
    the caller typed is taken out."""
    return refusal.replace(name, other)


async def refusal_of(a2a: A2A, message: Message) -> str:
    """The error class and words a message is answered with (it must be refused)."""
    try:
        await a2a.send(message)
    except A2AError as error:
        return f"{type(error).__name__}: {error}"
    raise AssertionError(f"{message.context_id} was not refused")


async def test_the_start_of_another_persons_id_gets_the_answer_of_a_name_that_fits_none(
    served: RunningServer,
) -> None:
    carol, bob = person(served), person(served)
    made = await turn(served, "edit:carols.txt carol's", token=carol)
    assert made.final_state == "completed", made.kinds()
    carols = made.context_id
    start, nothing = carols[:6], f"q{uuid.uuid4().hex[:5]}"  # no minted id starts with q
    bobs = A2A(served.url, bob)

    # diff, merge and discard, through the CLI and any A2A client: "not found", alike.
    for kind in ("diff", "merge", "discard"):
        theirs = run(served, kind, start, token=bob)
        none = run(served, kind, nothing, token=bob)
        assert theirs.returncode == none.returncode == 2, (theirs, none)
        assert same_words(theirs.stderr, start, nothing) == none.stderr, (theirs, none)
        assert none.stderr.strip().endswith(f"Conversation {nothing} not found"), none.stderr
        asked = [user_message(data={"kind": kind}, context_id=name) for name in (start, nothing)]
        refused = [await refusal_of(bobs, message) for message in asked]
        assert same_words(refused[0], start, nothing) == refused[1], refused
    assert await bobs.list(context_id=start) == await bobs.list(context_id=nothing) == []

    # A message starts a conversation of bob's under either name, in the same words.
    answers = [await bobs.send(user_message("hello", context_id=n)) for n in (start, nothing)]
    assert [a.task.context_id for a in answers] == [start, nothing]
    assert [a.task.status.state for a in answers] == [answers[1].task.status.state] * 2
    assert texts(answers[0].task.status.message) == texts(answers[1].task.status.message)
    # Carol's start still leads to carol's conversation, bob's whole id to bob's.
    again = run(served, "call", "hello", "--context", start, token=carol)
    assert again.returncode == 0 and ids_of(again)[1] == carols, again
    assert "+edit:carols.txt carol's" in run(served, "diff", start, token=carol).stdout


async def test_a_short_id_leads_its_owner_home_after_someone_took_it_as_a_name(
    served: RunningServer,
) -> None:
    carol, bob = person(served), person(served)
    made = run(served, "call", "edit:hers.txt carol's", token=carol)
    assert made.returncode == 0, made.stderr
    _, carols = ids_of(made)
    short = carols[:8]
    assert f"merge {short}" in made.stdout  # the short id carol is handed

    took = await A2A(served.url, bob).send(user_message("edit:his.txt bob's", context_id=short))
    assert took.task.context_id == short  # a name of bob's now: it says nothing of carol's
    for who, means, wrote in ((carol, carols, "carol's"), (bob, short, "bob's")):
        went_on = run(served, "call", "hello", "--context", short, token=who)
        assert went_on.returncode == 0 and ids_of(went_on)[1] == means, went_on
        diff = run(served, "diff", short, token=who)
        assert f"+edit:{'hers' if who == carol else 'his'}.txt {wrote}" in diff.stdout, diff
        assert ("carol's" in diff.stdout) == (who == carol), diff.stdout

    # The admin may act on both: a start that fits both is refused, naming both; a
    # whole id means itself.
    both = run(served, "call", "hello", "--context", carols[:7])
    assert both.returncode == 2, both
    assert both.stderr.strip().endswith(
        f"{carols[:7]} is the start of 2 of the conversations you may act on "
        f"({short}, {carols}): give more of its id"
    ), both.stderr
    whole = run(served, "call", "hello", "--context", short)
    assert whole.returncode == 0 and ids_of(whole)[1] == short, whole


def branches(server: RunningServer, token: str) -> dict[str, tuple[str, str]]:
    """The caller's conversations -> their branch and state, as `conversations` lists them."""
    listed = run(server, "conversations", "--json", token=token)
    assert listed.returncode == 0, listed.stderr
    rows = map(json.loads, listed.stdout.splitlines())
    return {row["contextId"]: (row["branch"], row["state"][:9]) for row in rows}


async def test_a_branch_name_says_nothing_of_another_persons_conversation(
    served: RunningServer,
) -> None:
    """Branch names are unique among one person's conversations only (issue 55 §5): bob's
    conversation whose id starts as carol's does gets `tailagent/<8 characters>`, the
    name it would have if hers did not exist, and each short name leads its owner home."""
    carol, bob = person(served), person(served)
    tag = uuid.uuid4().hex[:8]
    carols, bobs = f"{tag}-carol", f"{tag}-bob"
    made = await turn(served, f"edit:{tag}-hers.txt carol's", token=carol, context_id=carols)
    assert made.final_state == "completed" and made.context_id == carols, made.kinds()
    took = run(served, "call", f"edit:{tag}-his.txt bob's", "--context", bobs, token=bob)
    assert took.returncode == 0 and ids_of(took)[1] == bobs, took
    # What bob is shown is what a server without carol's conversation would show him.
    assert f"changes on tailagent/{tag} (+1 commit" in took.stdout, took.stdout
    assert f"merge {tag}" in took.stdout, took.stdout
    to_merge = (f"tailagent/{tag}", "changes t")
    assert branches(served, bob) == {bobs: to_merge}
    assert branches(served, carol) == {carols: to_merge}
    listed = await A2A(served.url, bob).list(context_id=bobs)
    assert [MessageToDict(t.metadata)["worktree"]["branch"] for t in listed] == [f"tailagent/{tag}"]

    # Each short name is the caller's own conversation; an admin's fits both: refused.
    for who, wrote in ((carol, "hers"), (bob, "his")):
        diff = run(served, "diff", tag, token=who)
        assert diff.returncode == 0, diff
        assert f"+edit:{tag}-{wrote}.txt" in diff.stdout and diff.stdout.count("+edit:") == 1
    both = run(served, "diff", tag)
    assert both.returncode == 2, both
    assert f"({bobs}, {carols}): give more of its id" in both.stderr, both.stderr

    merged = run(served, "merge", tag, "--yes", token=bob)
    assert merged.returncode == 0, merged
    assert branches(served, bob) == {bobs: (f"tailagent/{tag}", "merged at")}
    assert branches(served, carol) == {carols: to_merge}  # hers untouched
    diff = run(served, "diff", tag, token=carol)
    assert f"+edit:{tag}-hers.txt carol's" in diff.stdout and "bob's" not in diff.stdout, diff
    assert run(served, "merge", tag, "--yes", token=carol).returncode == 0
    assert branches(served, carol) == {carols: (f"tailagent/{tag}", "merged at")}


async def test_a_short_id_goes_on_in_a_conversation_without_worktrees(
    server: RunningServer,
) -> None:
    first = await turn(server, "hello")
    assert first.final_state == "completed", first.kinds()
    context_id = first.context_id
    again = run(server, "call", "hello again", "--context", context_id[:8])
    assert again.returncode == 0, again.stderr
    assert ids_of(again)[1] == context_id


@pytest.mark.skipif(postgres_missing() is not None, reason=postgres_missing() or "")
async def test_a_store_in_postgresql_finds_starts_the_same_way(tmp_path: Path) -> None:
    with running_postgres() as postgres:
        server = start_server(tmp_path, "--store", postgres.url)
        try:
            owner = person(server)
            context_id = (await turn(server, "hello", token=owner)).context_id
            again = run(server, "call", "hello again", "--context", context_id[:8], token=owner)
            assert again.returncode == 0, again.stderr
            assert ids_of(again)[1] == context_id
            # Another person's start is no candidate for them: a name of their own.
            message = user_message("hello", context_id=context_id[:8])
            theirs = await A2A(server.url, person(server)).send(message)
            assert theirs.task.context_id == context_id[:8]
            mine = run(server, "call", "hello", "--context", context_id[:8], token=owner)
            assert ids_of(mine)[1] == context_id
        finally:
            server.stop()


async def test_watch_and_cancel_take_a_unique_start_of_a_task_id(served: RunningServer) -> None:
    asked = await turn(served, "question")
    assert asked.final_state == "input_required", asked.kinds()
    task_id = asked.task_id
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
