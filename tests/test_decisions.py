"""Every decision on a prompt is signed: who, from which device, through which channel.

Through a real server and the a2a-sdk client: the resumed status says who decided
what, the audit row names the device, and a prompt is answered once: a second
answer, late or concurrent, is refused naming who answered first.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from a2a.client import Client
from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict

from tailagent.access.identity import Caller
from tailagent.agents.echo import COLOUR_QUESTION
from tailagent.bridge.answers.records import AnswerRecord, decision_text, first_answer_text
from tailagent.bridge.answers.requester import VIA_KEY, requester_of
from tests.a2a_helpers import A2A, Turn, data_parts, kind_of, state_name, texts, user_message
from tests.conftest import RunningServer, start_server
from tests.tailnet import FakeTailscaled, whois
from tests.warm_start import cli_run

SETTLE_TIMEOUT = 10.0


def follow_up(turn: Turn, text: str = "", **kwargs: Any) -> Any:
    return user_message(text, task_id=turn.task_id, context_id=turn.context_id, **kwargs)


def resumed_of(turn: Turn) -> Any:
    return next(s for s in turn.statuses if kind_of(s) == "resumed")


def audit_rows(server: RunningServer, task_id: str) -> list[dict[str, Any]]:
    """The task's audit rows, as `tailagent audit --json` prints them."""
    command = ["audit", "--json", "--state-dir", str(server.state_dir)]
    result = cli_run(
        [sys.executable, "-m", "tailagent", *command],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    return [row for row in rows if row["task_id"] == task_id]


async def settled(a2a: A2A, task_id: str, past_request: str) -> Task:
    """The task once it is done, or parked on a prompt other than `past_request`."""
    deadline = asyncio.get_running_loop().time() + SETTLE_TIMEOUT
    while True:
        task = await a2a.get(task_id)
        state = state_name(task.status.state)
        prompts = data_parts(task.status.message) if state == "input_required" else []
        if state in ("completed", "failed", "canceled") or (
            prompts and prompts[0]["requestId"] != past_request
        ):
            return task
        assert asyncio.get_running_loop().time() < deadline, f"task {task_id} stays {state}"
        await asyncio.sleep(0.05)


async def send_now(client: Client, message: Any) -> Task:
    """A non-blocking SendMessage: it returns once the server has taken the message."""
    request = SendMessageRequest(
        message=message, configuration=SendMessageConfiguration(return_immediately=True)
    )
    responses = [r async for r in client.send_message(request)]
    assert len(responses) == 1 and responses[0].HasField("task"), responses
    return responses[0].task


# --- the resumed status and the audit row ------------------------------------------------------


async def test_the_resumed_status_says_who_allowed(a2a: A2A, server: RunningServer) -> None:
    asked = await a2a.turn("ask:signed")
    request_id = asked.pending["requestId"]
    before = datetime.now(UTC).replace(microsecond=0)
    done = await a2a.turn(follow_up(asked, "yes", metadata={"requestId": request_id}))
    assert done.final_state == "completed"
    resumed = resumed_of(done)
    assert state_name(resumed.status.state) == "working"
    assert texts(resumed.status.message) == "allowed by token local"
    numbered = MessageToDict(resumed.metadata)
    sequence = numbered.pop("sequence")
    assert sequence > 1  # the event's number (docs/protocol.md), not a reply's
    assert numbered.pop("generation") == sequence  # the same, by A2A dev-1.1's name
    for metadata in (numbered, dict(resumed.status.message.metadata)):
        answered_at = datetime.fromisoformat(metadata.pop("answeredAt"))
        assert before <= answered_at <= datetime.now(UTC)
        assert metadata == {
            "kind": "resumed",
            "requestId": request_id,
            "decision": "allow",
            "answeredBy": "token:local",
            "answeredFrom": "",
            "via": "a2a",
        }
    [row] = audit_rows(server, asked.task_id)
    assert row["decision"] == "allow"
    # The local token has no device and came over A2A: how it got in, nothing more.
    assert re.fullmatch(r"token:local \(bearer token, [^)]*\)", row["answered_by"]), row


async def test_a_denial_says_who_denied_and_why(a2a: A2A) -> None:
    asked = await a2a.turn("ask:denied")
    data = {"kind": "permission_response", "decision": "deny", "reason": "not on main"}
    done = await a2a.turn(follow_up(asked, data=data))
    resumed = resumed_of(done)
    assert texts(resumed.status.message) == "denied by token local: not on main"
    assert MessageToDict(resumed.metadata)["decision"] == "deny"


async def test_an_answered_question_names_the_label(a2a: A2A) -> None:
    asked = await a2a.turn("question")
    done = await a2a.turn(follow_up(asked, data={"answers": {COLOUR_QUESTION: "blue"}}))
    resumed = resumed_of(done)
    assert texts(resumed.status.message) == "answered by token local: blue"
    assert MessageToDict(resumed.metadata)["decision"] == "answer"
    assert done.final_state == "completed"


def test_the_web_channel_and_the_device_are_named_in_words_and_in_the_audit() -> None:
    """The web page sets VIA_KEY on its requests (A2A callers cannot)."""
    alice = Caller(
        "user",
        "alice@example.com",
        node="laptop.tail1234.ts.net",
        established_by="whois 100.64.0.9",
    )
    context = ServerCallContext(state={"caller": alice, VIA_KEY: "web"})
    requester = requester_of(context)
    answerer = requester.answerer
    assert (answerer.by, answerer.node, answerer.via) == ("alice@example.com", "laptop", "web")
    denied = AnswerRecord("r1", "deny", "too risky", answerer)
    assert decision_text(denied) == "denied by alice@example.com from laptop via web: too risky"
    assert (
        requester_of(context).audit_name
        == "user:alice@example.com (whois 100.64.0.9) on laptop via web"
    )
    refusal = first_answer_text("t1", "r1", denied)
    assert refusal.startswith("request r1 of task t1 was already answered: denied by alice")
    assert re.search(r" at \d\d:\d\d:\d\d UTC$", refusal)
    ci = Caller("tagged", "", node="ci-runner.tail1234.ts.net", tags=("tag:ci",))
    allowed = AnswerRecord(
        "r2", "allow", "", requester_of(ServerCallContext(state={"caller": ci})).answerer
    )
    assert decision_text(allowed) == "allowed by tag:ci from ci-runner"


# --- a prompt is answered once -----------------------------------------------------------------


async def test_a_second_allow_is_refused_naming_who_answered_first(
    a2a: A2A, server: RunningServer
) -> None:
    asked = await a2a.turn("ask:twice")
    request_id = asked.pending["requestId"]
    done = await a2a.turn(follow_up(asked, "yes", metadata={"requestId": request_id}))
    assert done.final_state == "completed"
    once = await a2a.get(asked.task_id)
    again = {"kind": "permission_response", "decision": "allow", "requestId": request_id}
    with pytest.raises(A2AError) as refused:
        await a2a.send(follow_up(asked, data=again))
    expected = (
        rf"request {request_id} of task {asked.task_id} was already answered: "
        r"allowed by token local at \d\d:\d\d:\d\d UTC"
    )
    assert re.search(expected, str(refused.value)), str(refused.value)
    after = await a2a.get(asked.task_id)
    assert state_name(after.status.state) == "completed"
    assert after.status == once.status and list(after.history) == list(once.history)
    assert len(audit_rows(server, asked.task_id)) == 1


async def answer_twice_at_once(
    a2a: A2A, turn: Any, metadata: dict[str, str] | None
) -> tuple[str, BaseException]:
    """Two answers to the turn's prompt, "yes" and "no, not now", sent together on two
    open connections; returns the one accepted and the other's refusal."""
    words = ("yes", "no, not now")
    async with a2a.client(streaming=False) as one, a2a.client(streaming=False) as two:
        # Both connections open first, so the two answers reach the server together
        # (a new connection's set-up would let the first one's turn go on alone).
        for client in (one, two):
            await client.get_task(GetTaskRequest(id=turn.task_id))
        results = await asyncio.gather(
            *(
                send_now(client, follow_up(turn, word, metadata=metadata))
                for client, word in zip((one, two), words, strict=True)
            ),
            return_exceptions=True,
        )
    accepted = [w for w, r in zip(words, results, strict=True) if isinstance(r, Task)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(accepted) == 1 and len(refused) == 1, results
    assert isinstance(refused[0], A2AError), refused
    return accepted[0], refused[0]


async def test_two_answers_at_once_one_applies_the_other_is_refused(
    a2a: A2A, server: RunningServer
) -> None:
    turn = await a2a.turn("ask:one ask:two ask:three")
    request_id = turn.pending["requestId"]
    decisions = []
    for _ in range(3):
        accepted, refused = await answer_twice_at_once(a2a, turn, {"requestId": request_id})
        assert re.search("already answered", str(refused)), str(refused)
        assert "token local" in str(refused)
        decisions.append("allow" if accepted == "yes" else "deny")
        task = await settled(a2a, turn.task_id, request_id)
        assert state_name(task.status.state) != "failed", texts(task.status.message)
        if state_name(task.status.state) == "input_required":
            request_id = data_parts(task.status.message)[0]["requestId"]
    assert state_name(task.status.state) == "completed"
    rows = audit_rows(server, turn.task_id)
    assert [r["decision"] for r in rows] == decisions


async def test_two_unnamed_answers_at_once_one_applies_the_other_is_refused(
    a2a: A2A, server: RunningServer
) -> None:
    """Answers that name no prompt are for the one pending when each is taken. A task
    with one prompt, so a second answer can meet no other: it is refused, whether the
    prompt is being answered, the task works on, or it has already completed."""
    for _ in range(3):
        turn = await a2a.turn("ask:once")
        accepted, refused = await answer_twice_at_once(a2a, turn, None)
        assert re.search("already answered|still working|already completed", str(refused)), str(
            refused
        )
        task = await settled(a2a, turn.task_id, turn.pending["requestId"])
        assert state_name(task.status.state) == "completed", texts(task.status.message)
        rows = audit_rows(server, turn.task_id)
        assert [r["decision"] for r in rows] == ["allow" if accepted == "yes" else "deny"]


async def test_an_unparseable_answer_restates_the_prompt_and_frees_it(a2a: A2A) -> None:
    asked = await a2a.turn("ask:later")
    request_id = asked.pending["requestId"]
    unclear = {"kind": "permission_response", "decision": "maybe later?"}
    restated = await a2a.turn(follow_up(asked, data=unclear))
    assert restated.final_state == "input_required"
    assert 'decision must be "allow" or "deny"' in texts(restated.last_message)
    assert restated.pending["requestId"] == request_id
    assert not any(kind_of(s) == "resumed" for s in restated.statuses)
    done = await a2a.turn(follow_up(asked, "yes", metadata={"requestId": request_id}))
    assert done.final_state == "completed"
    assert texts(resumed_of(done).status.message) == "allowed by token local"


async def test_an_answer_whose_request_fails_gives_the_prompt_back(a2a: A2A) -> None:
    asked = await a2a.turn("ask:hook")
    push = TaskPushNotificationConfig(url="ftp://example.com/hook")
    request = SendMessageRequest(
        message=follow_up(asked, "yes"),
        configuration=SendMessageConfiguration(task_push_notification_config=push),
    )
    async with a2a.client(streaming=False) as client:
        with pytest.raises(A2AError, match="must be http or https"):
            [r async for r in client.send_message(request)]
    done = await a2a.turn(follow_up(asked, "yes"))
    assert done.final_state == "completed"
    assert texts(resumed_of(done).status.message) == "allowed by token local"


@pytest.fixture(scope="module")
def one_turn_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server that works on one message at a time: an answer can be held at the gate."""
    tmp = tmp_path_factory.mktemp("one-turn")
    config = tmp / "tailagent.toml"
    config.write_text("[agent]\nmax_concurrent_turns = 1\n")
    server = start_server(tmp, "--config", str(config))
    yield server
    server.stop()


async def test_an_answer_held_before_it_applies_refuses_the_next(
    one_turn_server: RunningServer,
) -> None:
    a2a = A2A(one_turn_server.url, one_turn_server.token)
    asked = await a2a.turn("ask:held")
    request_id = asked.pending["requestId"]
    async with a2a.client() as client:
        busy = client.send_message(SendMessageRequest(message=user_message("slow 30")))
        slow = (await anext(busy)).task.id  # it holds the one place until it ends
        first = asyncio.create_task(
            a2a.turn(follow_up(asked, "yes", metadata={"requestId": request_id}))
        )
        await asyncio.sleep(0.5)  # admitted, claimed, waiting for the place
        assert not first.done()
        # Without requestId too: an answer applies to the pending prompt, which is held.
        with pytest.raises(A2AError) as refused:
            await a2a.send(follow_up(asked, "no"))
        expected = (
            rf"request {request_id} of task {asked.task_id} was already answered "
            r"by token local at \d\d:\d\d:\d\d UTC"
        )
        assert re.search(expected, str(refused.value)), str(refused.value)
        await a2a.cancel(slow)
        assert state_name([e async for e in busy][-1].status_update.status.state) == "canceled"
    done = await asyncio.wait_for(first, SETTLE_TIMEOUT)
    assert done.final_state == "completed"
    assert texts(resumed_of(done).status.message) == "allowed by token local"


# --- people and nodes of the tailnet -----------------------------------------------------------

CONFIG = """
[access]
allowed_logins = ["alice@example.com"]
allowed_tags = ["tag:ci"]
tag_roles = ["caller", "approver"]
"""


@pytest.fixture(scope="module")
def tailnet_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("decisions")
    fake = FakeTailscaled(tmp / "tailscaled").start()
    fake.peers["100.64.0.9"] = whois("alice@example.com", ip="100.64.0.9")
    fake.peers["100.64.0.20"] = whois(tags=("tag:ci",), name="ci-runner", ip="100.64.0.20")
    fake.write()
    config = tmp / "tailagent.toml"
    config.write_text(CONFIG)
    server = start_server(tmp, "--config", str(config), "--tailscale-socket", str(fake.socket))
    yield server
    server.stop()
    fake.stop()


def peer(server: RunningServer, ip: str) -> A2A:
    """A tailnet peer as `tailscale serve` forwards it (tests run as root, like tailscaled)."""
    a2a = A2A(server.url)
    a2a.auth = {"X-Forwarded-For": ip}
    return a2a


@pytest.mark.parametrize(
    ("ip", "words", "audited"),
    [
        ("100.64.0.9", "allowed by alice@example.com from laptop", r"user:alice@example\.com"),
        ("100.64.0.20", "allowed by tag:ci from ci-runner", r"tags:tag:ci"),
    ],
    ids=["person", "tagged-node"],
)
async def test_a_tailnet_decision_names_the_device(
    tailnet_server: RunningServer, ip: str, words: str, audited: str
) -> None:
    a2a = peer(tailnet_server, ip)
    asked = await a2a.turn("ask:device")
    done = await a2a.turn(follow_up(asked, "yes"))
    resumed = resumed_of(done)
    assert texts(resumed.status.message) == words
    device = words.rsplit(" ", 1)[1]
    assert MessageToDict(resumed.metadata)["answeredFrom"] == device
    [row] = audit_rows(tailnet_server, asked.task_id)
    assert re.fullmatch(rf"{audited} \([^)]*\) on {device}", row["answered_by"]), row
