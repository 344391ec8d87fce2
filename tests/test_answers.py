"""The answer rules of DESIGN.md: the free-text table row by row, then each rule live."""

from __future__ import annotations

import asyncio

import pytest
from a2a.types.a2a_pb2 import SendMessageRequest
from a2a.utils.errors import A2AError

from tailagent.agents.events import PermissionAsked, PermissionOption, Question, QuestionAsked
from tailagent.bridge.answers.reading import (
    UNCLEAR_REASON,
    AnswerError,
    Reply,
    classify_free_text,
    parse_answer,
)
from tests.a2a_helpers import A2A, kind_of, state_name, texts, user_message

# (reply, verdict): English and French, punctuation, case, the 8-word limit.
FREE_TEXT_TABLE = [
    ("yes", "allow"),
    ("Yes.", "allow"),
    ("y", "allow"),
    ("ok go ahead", "allow"),
    ("okay", "allow"),
    ("sure!", "allow"),
    ("allow", "allow"),
    ("go", "allow"),
    ("oui", "allow"),
    ("oui, vas-y", "allow"),
    ("d'accord", "allow"),
    ("D’accord !", "allow"),
    ("autorise", "allow"),
    ("no", "deny"),
    ("No.", "deny"),
    ("nope", "deny"),
    ("deny", "deny"),
    ("refuse", "deny"),
    ("stop", "deny"),
    ("cancel", "deny"),
    ("non", "deny"),
    ("non, jamais", "deny"),
    ("annule", "deny"),
    ("ok but no", "deny"),
    ("yes no", "deny"),
    ("no, run pytest -x instead", "deny"),
    ("maybe", "unclear"),
    ("", "unclear"),
    ("peut-être", "unclear"),
    ("yesterday", "unclear"),
    ("go go go go go go go go go", "unclear"),
    ("yes I think that would be fine for this repository", "unclear"),
]


@pytest.mark.parametrize(("reply", "verdict"), FREE_TEXT_TABLE)
def test_free_text_decision_table(reply: str, verdict: str) -> None:
    assert classify_free_text(reply) == verdict


ASK = PermissionAsked(
    "req-1",
    "Bash",
    {"command": "ls"},
    "Run `ls`",
    options=(
        PermissionOption("allow_once", "Allow", "allow_once"),
        PermissionOption("reject_once", "Deny", "reject_once"),
    ),
)


def test_structured_permission_response_wins_over_text() -> None:
    reply = Reply("yes", ({"kind": "permission_response", "decision": "deny", "reason": "r"},))
    parsed = parse_answer(reply, ASK)
    assert parsed.denied and parsed.reason == "r"
    assert parsed.answer.option_id == "reject_once"  # type: ignore[union-attr]
    assert "Do not request the same permission again" in parsed.answer.message  # type: ignore[union-attr]


def test_unclear_text_denies_with_a_reason_that_says_so() -> None:
    parsed = parse_answer(Reply("hmm, what does it do?"), ASK)
    assert parsed.denied and parsed.reason == UNCLEAR_REASON


def test_option_id_picks_the_agents_option() -> None:
    assert not parse_answer(Reply("option:allow_once"), ASK).denied
    with pytest.raises(AnswerError, match="unknown option"):
        parse_answer(Reply("option:nope"), ASK)


def test_answer_for_another_request_is_refused() -> None:
    with pytest.raises(AnswerError, match="pending request is req-1"):
        parse_answer(Reply("yes", request_id="req-2"), ASK)
    with pytest.raises(AnswerError):
        parse_answer(
            Reply(
                "", ({"kind": "permission_response", "decision": "allow", "requestId": "other"},)
            ),
            ASK,
        )


def test_question_free_text_answers_the_first_question() -> None:
    asked = QuestionAsked("q", (Question("First?"), Question("Second?")))
    parsed = parse_answer(Reply("blue"), asked)
    assert parsed.answer.answers == {"First?": "blue"}  # type: ignore[union-attr]
    with pytest.raises(AnswerError, match="no such question"):
        parse_answer(Reply("", ({"answers": {"Third?": "x"}},)), asked)


# --- the same rules through a running server -------------------------------------------------


def follow_up(turn, text: str = "", **kwargs):  # type: ignore[no-untyped-def]
    return user_message(text, task_id=turn.task_id, context_id=turn.context_id, **kwargs)


async def test_allow_in_words_runs_the_tool(a2a: A2A) -> None:
    asked = await a2a.turn("ask")
    done = await a2a.turn(follow_up(asked, "oui, vas-y"))
    assert done.final_state == "completed"
    assert any(kind_of(s) == "tool_result" for s in done.statuses)


async def test_structured_deny_beats_a_contradicting_yes(a2a: A2A) -> None:
    asked = await a2a.turn("ask:x")
    data = {"kind": "permission_response", "decision": "deny", "reason": "not on my machine"}
    done = await a2a.turn(follow_up(asked, "yes", data=data))
    notice = next(s for s in done.statuses if kind_of(s) == "notice")
    assert "not on my machine" in texts(notice.status.message)
    assert done.final_state == "completed"


async def test_answer_with_a_stale_request_id_is_refused_and_the_pause_restated(a2a: A2A) -> None:
    asked = await a2a.turn("ask")
    request_id = asked.pending["requestId"]
    refused = await a2a.turn(follow_up(asked, "yes", metadata={"requestId": "stale"}))
    assert refused.final_state == "input_required"
    assert "pending request is " + request_id in texts(refused.last_message)
    assert refused.pending["requestId"] == request_id
    assert not any(kind_of(s) == "tool_result" for s in refused.statuses)
    done = await a2a.turn(follow_up(asked, "yes", metadata={"requestId": request_id}))
    assert done.final_state == "completed"


async def test_answer_without_request_id_applies_to_the_pending_prompt(a2a: A2A) -> None:
    asked = await a2a.turn("question")
    data = {"answers": {"Which colour do you prefer?": "red"}}
    done = await a2a.turn(follow_up(asked, "blue", data=data))
    response = "".join(texts(c.artifact) for c in done.artifacts("response"))
    assert "You chose red." in response


async def test_same_denied_request_twice_fails_once_saying_why(a2a: A2A) -> None:
    asked = await a2a.turn("ask ask")
    done = await a2a.turn(follow_up(asked, "no"))
    terminal = [
        s
        for s in done.statuses
        if state_name(s.status.state) in ("completed", "failed", "canceled")
    ]
    assert len(terminal) == 1
    assert done.final_state == "failed"
    assert "same denied permission again (Bash)" in texts(done.last_message)
    task = await a2a.get(asked.task_id)
    assert state_name(task.status.state) == "failed"


async def test_too_many_denials_fail_the_task(a2a: A2A) -> None:
    turn = await a2a.turn("ask:a ask:b ask:c ask:d")
    for expected in ("input_required", "input_required", "failed"):
        turn = await a2a.turn(follow_up(turn, "deny"))
        assert turn.final_state == expected
    assert "3 permission denials in this task (limit 3)" in texts(turn.last_message)


async def test_a_message_for_a_working_task_is_refused_and_the_turn_goes_on(a2a: A2A) -> None:
    async with a2a.client() as client:
        stream = client.send_message(SendMessageRequest(message=user_message("slow 2")))
        first = await anext(stream)
        task_id, context_id = first.task.id, first.task.context_id
        with pytest.raises(A2AError, match="still working"):
            await a2a.send(user_message("hello", task_id=task_id, context_id=context_id))
        rest = [e async for e in stream]
    assert state_name(rest[-1].status_update.status.state) == "completed"


async def test_cancel_a_working_task(a2a: A2A) -> None:
    async with a2a.client() as client:
        stream = client.send_message(SendMessageRequest(message=user_message("slow 30")))
        first = await anext(stream)
        await anext(stream)  # working
        canceled = await a2a.cancel(first.task.id)
        assert state_name(canceled.status.state) == "canceled"
        await asyncio.wait_for(stream.aclose(), 5)
    task = await a2a.get(first.task.id)
    assert state_name(task.status.state) == "canceled"
    # The context's session is free again: a new task on it runs.
    again = await a2a.turn(user_message("again", context_id=first.task.context_id))
    assert again.final_state == "completed"


async def test_cancel_a_parked_task_denies_the_prompt(a2a: A2A) -> None:
    asked = await a2a.turn("ask")
    canceled = await a2a.cancel(asked.task_id)
    assert state_name(canceled.status.state) == "canceled"
    task = await a2a.get(asked.task_id)
    assert state_name(task.status.state) == "canceled"
    assert "canceled by the caller" in texts(task.status.message)
    with pytest.raises(A2AError):
        await a2a.send(follow_up(asked, "yes"))


async def test_follow_up_turns_on_a_context_reach_the_same_agent_session(a2a: A2A) -> None:
    first = await a2a.turn("one")
    second = await a2a.turn(user_message("two", context_id=first.context_id))
    assert second.task_id != first.task_id
    one, two = (t.statuses[-1].metadata for t in (first, second))
    assert one["agentSessionId"] == two["agentSessionId"]
    assert two["usage"]["turns"] == one["usage"]["turns"] + 1


async def test_a_busy_context_refuses_a_second_task(a2a: A2A) -> None:
    asked = await a2a.turn("ask")
    with pytest.raises(A2AError, match="busy with task"):
        await a2a.send(user_message("hi", context_id=asked.context_id))
    await a2a.cancel(asked.task_id)
