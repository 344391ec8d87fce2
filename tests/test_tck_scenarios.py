"""The A2A TCK's messageId triggers, as the echo agent acts them out."""

from __future__ import annotations

from google.protobuf.json_format import MessageToDict

from tests.a2a_helpers import A2A, state_name, texts, user_message


async def test_complete_task(a2a: A2A) -> None:
    sent = await a2a.send(user_message("x", message_id="tck-complete-task-1234-jsonrpc"))
    assert state_name(sent.task.status.state) == "completed"
    assert texts(sent.task.status.message) == "Hello from TCK"


async def test_message_response_is_a_direct_message(a2a: A2A) -> None:
    sent = await a2a.send(user_message("x", message_id="tck-message-response-1"))
    assert sent.HasField("message")
    assert texts(sent.message) == "Direct message response"


async def test_input_required_then_completed_by_a_follow_up(a2a: A2A) -> None:
    asked = await a2a.send(user_message("x", message_id="tck-input-required-1"))
    assert state_name(asked.task.status.state) == "input_required"
    done = await a2a.send(
        user_message("x", task_id=asked.task.id, message_id="tck-complete-task-2")
    )
    assert state_name(done.task.status.state) == "completed"


async def test_artifacts(a2a: A2A) -> None:
    expected = {
        "tck-artifact-text": {"text": "Generated text content"},
        "tck-artifact-file": {"raw": "dGNr", "filename": "output.txt", "mediaType": "text/plain"},
        "tck-artifact-file-url": {
            "url": "https://example.com/output.txt",
            "filename": "output.txt",
            "mediaType": "text/plain",
        },
        "tck-artifact-data": {
            "data": {"key": "value", "count": 42},
            "mediaType": "application/json",
        },
    }
    for prefix, part in expected.items():
        sent = await a2a.send(user_message("x", message_id=f"{prefix}-abcd"))
        (artifact,) = sent.task.artifacts
        assert MessageToDict(artifact.parts[0]) == part, prefix


async def test_streamed_scenario_closes_after_completion(a2a: A2A) -> None:
    turn = await a2a.turn(user_message("x", message_id="tck-stream-001-x"))
    assert turn.final_state == "completed"
    (artifact,) = [e for e in turn.events if e.HasField("artifact_update")]
    assert texts(artifact.artifact_update.artifact) == "Stream hello from TCK"


async def test_unknown_tck_prefix_is_an_ordinary_echo_turn(a2a: A2A) -> None:
    sent = await a2a.send(user_message("hello", message_id="tck-dm-test-001-x"))
    assert state_name(sent.task.status.state) == "completed"
    assert texts(sent.task.artifacts[0]) == "echo: hello"
