"""Every row of DESIGN.md's mapping table, seen through a real server and the a2a-sdk client."""

from __future__ import annotations

import uuid

from google.protobuf.json_format import MessageToDict

from tests.a2a_helpers import A2A, data_parts, kind_of, state_name, texts, user_message


async def test_text_streams_as_response_artifact_chunk_by_chunk(a2a: A2A) -> None:
    turn = await a2a.turn("hello there")
    chunks = turn.artifacts("response")
    assert [texts(c.artifact) for c in chunks[:2]] == ["echo: ", "hello there"]
    assert [c.append for c in chunks] == [False, True, True]
    assert [c.last_chunk for c in chunks] == [False, False, True]
    assert len(chunks[-1].artifact.parts) == 0


async def test_thought_becomes_the_thinking_artifact(a2a: A2A) -> None:
    turn = await a2a.turn("think")
    (thinking,) = turn.artifacts("thinking")
    assert texts(thinking.artifact) == "Thinking about: think"
    assert "Thinking" not in "".join(texts(c.artifact) for c in turn.artifacts("response"))


async def test_plan_is_replaced_in_place_as_steps_move(a2a: A2A) -> None:
    turn = await a2a.turn("plan")
    first, second = turn.artifacts("plan")
    assert not first.append and not second.append
    entries = data_parts(second.artifact)[0]["entries"]
    assert [e["status"] for e in entries] == ["completed", "in_progress", "pending"]
    task = await a2a.get(turn.task_id)
    (plan,) = [a for a in task.artifacts if a.artifact_id == "plan"]
    assert "[x] Read the code" in texts(plan)


async def test_tool_calls_are_working_statuses_tagged_tool_use_and_tool_result(a2a: A2A) -> None:
    turn = await a2a.turn("tool")
    tool_statuses = [s for s in turn.statuses if kind_of(s) in ("tool_use", "tool_result")]
    assert [state_name(s.status.state) for s in tool_statuses] == ["working", "working"]
    use, result = tool_statuses
    assert use.status.message.metadata["kind"] == "tool_use"
    assert texts(use.status.message) == "Calling tool Read calc.py"
    assert data_parts(use.status.message)[0]["input"] == {"path": "calc.py"}
    assert result.status.message.metadata["kind"] == "tool_result"
    assert "return a - b" in data_parts(result.status.message)[0]["output"]


async def test_file_change_is_one_diff_artifact_per_path(a2a: A2A) -> None:
    # A file of its own: the session's server is shared, and an `edit` another module
    # made there leaves calc.py with nothing to fix (and so no diff).
    path = f"mapping_{uuid.uuid4().hex[:8]}.py"
    turn = await a2a.turn(f"edit:{path}")
    (diff,) = turn.artifacts(f"diff:{path}")
    part = diff.artifact.parts[0]
    assert diff.artifact.name == path
    assert part.media_type == "text/x-diff"
    assert part.text.splitlines()[-1] == f"+edit:{path}"  # what the file now holds


async def test_permission_prompt_is_input_required_with_bare_text_and_data(a2a: A2A) -> None:
    turn = await a2a.turn("ask")
    assert turn.final_state == "input_required"
    message = turn.last_message
    assert message.metadata["kind"] == "permission_request"
    assert texts(message) == "Permission requested: Run `rm -rf build`"
    data = turn.pending
    assert data["kind"] == "permission_request"
    assert data["toolName"] == "Bash"
    assert data["input"] == {"command": "rm -rf build"}
    assert data["title"] == "Run `rm -rf build`"
    assert data["decisionReason"]
    assert [o["optionId"] for o in data["options"]] == ["allow_once", "reject_once"]
    assert len(data["requestId"]) == 32
    await a2a.cancel(turn.task_id)


async def test_question_is_input_required_with_the_questions(a2a: A2A) -> None:
    turn = await a2a.turn("question")
    assert texts(turn.last_message) == "Which colour do you prefer?"
    data = turn.pending
    assert data["kind"] == "ask_user_question"
    (question,) = data["questions"]
    assert [o["label"] for o in question["options"]] == ["red", "blue"]
    await a2a.cancel(turn.task_id)


async def test_turn_done_sends_a_result_status_then_completed_with_usage(a2a: A2A) -> None:
    turn = await a2a.turn("done")
    *_, result, completed = turn.statuses
    assert state_name(result.status.state) == "working"
    assert result.status.message.metadata["kind"] == "result"
    assert texts(result.status.message) == "echo: done"
    assert state_name(completed.status.state) == "completed"
    outcome = MessageToDict(completed.metadata)
    assert outcome["stopReason"] == "end_turn"
    assert outcome["usage"]["turns"] >= 1
    assert outcome["costUsd"] == 0


async def test_turn_failed_fails_the_task_with_the_reason(a2a: A2A) -> None:
    turn = await a2a.turn("boom")
    assert turn.final_state == "failed"
    assert texts(turn.last_message) == "boom: the echo agent failed on purpose"
    task = await a2a.get(turn.task_id)
    assert state_name(task.status.state) == "failed"


async def test_notice_is_a_working_status_tagged_notice(a2a: A2A) -> None:
    turn = await a2a.turn("ask:one then finish")
    answered = await a2a.turn(
        user_message("no thanks", task_id=turn.task_id, context_id=turn.context_id)
    )
    notices = [s for s in answered.statuses if kind_of(s) == "notice"]
    assert notices and "Permission denied" in texts(notices[0].status.message)
    assert answered.final_state == "completed"


async def test_every_status_message_carries_a_kind(a2a: A2A) -> None:
    turn = await a2a.turn("think plan tool edit")
    for status in turn.statuses:
        if status.status.HasField("message"):
            assert status.status.message.metadata["kind"], status
        assert MessageToDict(status.metadata)["kind"]


async def test_resumed_turn_starts_with_the_stored_task_then_resumed(a2a: A2A) -> None:
    first = await a2a.turn("question")
    second = await a2a.turn(
        user_message("blue", task_id=first.task_id, context_id=first.context_id)
    )
    head = second.events[0]
    assert head.HasField("task") and head.task.id == first.task_id
    assert state_name(head.task.status.state) == "input_required"
    assert second.kinds()[0] == "resumed"
    assert "You chose blue." in "".join(texts(c.artifact) for c in second.artifacts("response"))
    assert second.final_state == "completed"
