"""The desk's journal on its own: what a page that comes back after a cut is sent.

Real A2A tasks, grown the way the SDK grows them (status messages moving into the
history, artifacts appended), cut into entries and numbered; the browser tests show
the same through a real dropped connection.
"""

from __future__ import annotations

from a2a.types.a2a_pb2 import Artifact, Message, Part, Role, Task, TaskState, TaskStatus

from tailagent.web.views.live import Journal


def task(*, answer: str, tools: int, state: int = TaskState.TASK_STATE_WORKING) -> Task:
    made = Task(id="t1", context_id="c1", status=TaskStatus(state=state))
    made.history.append(Message(message_id="m0", role=Role.ROLE_USER, parts=[Part(text="fix it")]))
    for n in range(tools):
        message = Message(message_id=f"s{n}", role=Role.ROLE_AGENT, parts=[Part(text="ran")])
        message.metadata.update({"kind": "tool_use", "toolCallId": f"tool-{n}"})
        made.history.append(message)
    made.artifacts.append(
        Artifact(artifact_id="response", name="response", parts=[Part(text=answer)])
    )
    return made


def test_a_page_that_saw_some_changes_gets_the_rest_once_each() -> None:
    journal = Journal("t1", "user:alice@example.com")
    journal.apply(task(answer="one", tools=1))
    seen = journal.event_id
    journal.apply(task(answer="one two", tools=2))
    journal.apply(task(answer="one two three", tools=3))
    reset, changes = journal.since(seen)
    assert not reset
    keys = [c.key for c in changes]
    assert len(keys) == len(set(keys))  # each changed entry once, in its latest form
    assert {"answer", "tool:tool-1", "tool:tool-2"} <= set(keys)
    assert "tool:tool-0" not in keys and "m:m0" not in keys  # seen already, unchanged
    answer = next(c for c in changes if c.key == "answer")
    assert answer.entry is not None and answer.entry.data["text"] == "one two three"
    assert journal.since(journal.event_id) == (False, [])


def test_an_unknown_position_gets_everything_as_a_reset() -> None:
    journal = Journal("t1", "user:alice@example.com")
    journal.apply(task(answer="one", tools=2))
    for stale in ("", "otherepoch.3", f"{journal.epoch}.999", "garbage"):
        reset, changes = journal.since(stale)
        assert reset
        assert [c.key for c in changes][:2] == ["head", "m:m0"]  # display order


def test_an_answered_question_leaves_the_page() -> None:
    journal = Journal("t1", "user:alice@example.com")
    waiting = task(answer="", tools=0, state=TaskState.TASK_STATE_INPUT_REQUIRED)
    waiting.status.message.CopyFrom(
        Message(message_id="q", role=Role.ROLE_AGENT, parts=[Part(text="May I?")])
    )
    journal.apply(waiting)
    seen = journal.event_id
    assert "ask" in journal.changes
    journal.apply(task(answer="done", tools=0))
    _, changes = journal.since(seen)
    gone = next(c for c in changes if c.key == "ask")
    assert gone.entry is None  # the page removes it
