"""`call` addressed as a person types it (issue 56, items 7 and 8), through a real server
in a throwaway git repository and the real CLI in an 80-column terminal.

`call --task a3840a53` said "Task a3840a53 not found" while `watch` and `cancel` took
short ids; `call allow` without `--task` sent "allow" as a new prompt; a mistyped
`--context` started a new conversation named after the typo without a word.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator

import pytest
from a2a.types.a2a_pb2 import TaskState

from tests.a2a_helpers import A2A
from tests.conftest import RunningServer
from tests.test_short_ids import ids_of, person, project_server, run, turn


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    yield from project_server(tmp_path_factory, "addressing")


async def waiting(server: RunningServer, token: str) -> list[str]:
    """The ids of the person's tasks that wait for an answer."""
    listed = await A2A(server.url, token).list(status=TaskState.TASK_STATE_INPUT_REQUIRED)
    return sorted(task.id for task in listed)


async def asking(server: RunningServer, text: str, token: str) -> str:
    """A task of the person's that waits for an answer: the state the CLI then meets."""
    asked = await turn(server, text, token=token)
    assert asked.final_state == "input_required", asked.kinds()
    return asked.task_id


def fits(text: str) -> list[str]:
    """The lines of a listing, each within the terminal's 80 columns."""
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), text
    return lines


async def test_call_task_takes_the_short_id_watch_and_cancel_take(served: RunningServer) -> None:
    token = person(served)
    task_id = await asking(served, "ask", token)
    allowed = run(served, "call", "allow", "--task", task_id[:8], token=token)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr  # was: not found
    assert ids_of(allowed)[0] == task_id
    assert allowed.stdout.rstrip().endswith("[completed]"), allowed.stdout

    a2a = A2A(served.url, token)
    while True:  # until two of the person's tasks begin alike
        firsts = Counter(t.id[0] for t in await a2a.list(page_size=100))
        start, count = firsts.most_common(1)[0]
        if count > 1:
            break
        await a2a.send("hello")
    several = run(served, "call", "hello again", "--task", start, token=token)
    assert several.returncode == 2, several
    said = several.stderr.splitlines()[-1]
    assert said.startswith(f"tailagent: {start} is the start of {count} of your tasks ("), said
    assert said.endswith("): give more of its id"), said
    assert len(await a2a.list(page_size=100)) == sum(firsts.values())  # nothing sent


async def test_a_bare_allow_answers_the_one_waiting_task_or_asks_which(
    served: RunningServer,
) -> None:
    token = person(served)
    nothing = run(served, "call", "allow", token=token)
    assert nothing.returncode == 2, nothing
    assert nothing.stderr.splitlines() == [
        "tailagent: none of your tasks waits for an answer, so 'allow' answers nothing: "
        "nothing sent (to send it as a new prompt: --new)"
    ]
    assert await A2A(served.url, token).list() == []  # no task was made

    task_id = await asking(served, "ask", token)
    allowed = run(served, "call", "allow", token=token)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert ids_of(allowed)[0] == task_id  # the waiting one, not a new task
    assert allowed.stdout.rstrip().endswith("[completed]"), allowed.stdout

    first = await asking(served, "ask:one tidy up", token)
    second = await asking(served, "ask:two and the rest", token)
    which = run(served, "call", "deny: not now", token=token)
    assert which.returncode == 2, which
    lines = fits(which.stderr)
    assert lines[0] == "tailagent: 2 of your tasks wait for an answer:", lines
    rows = sorted(lines[1:3])
    for row, (task, title, rm) in zip(
        rows,
        sorted([(first, "ask:one tidy up", "one"), (second, "ask:two and the rest", "two")]),
        strict=True,
    ):  # its short id, its title, what it asks
        assert row.startswith(f"  {task[:8]}  {title} — asks: "), row
        assert f"rm -rf {rm}" in row, row
    assert lines[3].startswith("tailagent: nothing sent: say which with --task"), lines
    assert await waiting(served, token) == sorted([first, second])  # neither answered

    # Someone who means the word as a prompt says so.
    prompt = run(served, "call", "allow", "--new", token=token)
    assert prompt.returncode == 0, prompt.stderr
    assert ids_of(prompt)[0] not in (first, second) and "echo: allow" in prompt.stdout
    for task in (first, second):
        denied = run(served, "call", "deny", "--task", task[:8], token=token)
        assert denied.returncode in (0, 1) and ids_of(denied)[0] == task, denied

    # A question is answered with --answer: a bare allow says so and sends nothing.
    question = await asking(served, "question", token)
    refused = run(served, "call", "allow", token=token)
    assert refused.returncode == 2, refused
    (said,) = refused.stderr.splitlines()
    assert said.startswith(f"tailagent: your waiting task {question[:8]} (question) asks a "
                           "question, not for permission: answer it with"), said  # fmt: skip
    assert await waiting(served, token) == [question]


async def test_a_context_that_is_none_of_yours_says_so_and_existing_refuses(
    served: RunningServer,
) -> None:
    token = person(served)
    first = await turn(served, "edit:notes.txt one", token=token)
    assert first.final_state == "completed", first.kinds()
    context_id = first.context_id
    short = context_id[:8]
    typo = short[:-1] + ("0" if short[-1] != "0" else "1")

    refused = run(served, "call", "edit:more.txt two", "--context", typo, "--existing",
                  token=token)  # fmt: skip
    assert refused.returncode == 2, refused
    assert refused.stderr.splitlines() == [
        f"tailagent: no conversation of yours is {typo}; nothing sent (did you mean {short}?)"
    ]
    assert len(await A2A(served.url, token).list()) == 1  # nothing sent

    kept = run(served, "call", "hello", "--context", short, "--existing", token=token)
    assert kept.returncode == 0 and kept.stderr == "", kept
    assert ids_of(kept)[1] == context_id

    name = f"fresh-{uuid.uuid4().hex[:6]}"
    started = run(served, "call", "hello", "--context", name, token=token)
    assert started.returncode == 0, started.stderr
    assert started.stderr.splitlines() == [
        f"tailagent: no conversation of yours is {name}: this starts a new one by that name "
        "(--existing refuses instead)"
    ]
    assert ids_of(started)[1] == name
    again = run(served, "call", "hello", "--context", name, token=token)
    assert again.returncode == 0 and again.stderr == "", again  # now it is one of theirs
