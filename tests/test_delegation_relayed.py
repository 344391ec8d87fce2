"""A question box B relays to box A lives once, and only the person answers it on A
(issue 55, section 3).

Two real servers on loopback (tests/two_boxes.py): alice's turn on A hands work to B
(`delegate:devbox-2 ask:NAME`: B's echo agent asks to run `rm -rf NAME`), and B's
question is relayed back into her task on A. A's owner is let in from their own device;
B's owner answers on B with B's local admin token. The tests that neither restart nor
reconfigure a box share one pair: each follows its own task on A, B's task it handed
work to (by the link A keeps), and only that task's rows of B's audit log, so a task
another test left waiting cannot pass for its own.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf.json_format import MessageToDict

from tailagent.store.audit import AuditLog
from tailagent.store.database import open_database
from tests.tailnet import OWNER, whois
from tests.test_delegation_restart import (
    LAPTOP,
    allow,
    answer_text,
    as_alice,
    peer_task_of,
    waiting_on,
)
from tests.test_delegation_wire import peer_task, state_name_of
from tests.test_tokens_and_owners import tailagent
from tests.two_boxes import A_NODE, ALICE, Boxes, start_boxes

OWNERS_DESK = "100.64.0.30"  # A's owner's own device, as A's tailscaled names it


def start(tmp_path: Path, b_delegation: str = "") -> Boxes:
    """A lets alice in and hands work to devbox-2 without asking; A's owner is let in as
    owner. `b_delegation`: more lines of B's `[delegation]` (B restarted with them)."""
    boxes = start_boxes(
        tmp_path,
        a_sections=f'[access]\nallowed_logins = ["{ALICE}"]\n',
        a_delegation='allow_peers = ["devbox-2"]\n',
        a_callers={LAPTOP: whois(ALICE, ip=LAPTOP), OWNERS_DESK: whois(OWNER, ip=OWNERS_DESK)},
    )
    if b_delegation:
        config = tmp_path / "b.toml"
        config.write_text(config.read_text() + b_delegation)
        boxes.restart_b()
    return boxes


@pytest.fixture(scope="module")
def boxes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Boxes]:
    made = start(tmp_path_factory.mktemp("relayed"))
    yield made
    made.stop()


def send(url: str, message: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    """A SendMessage's JSON-RPC reply, a result or an error."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    reply: dict[str, Any] = httpx.post(
        url, json=body, headers={"A2A-Version": "1.0", **headers}, timeout=60
    ).json()
    return reply


def as_a_owner(boxes: Boxes, message: dict[str, Any]) -> dict[str, Any]:
    """A SendMessage to A from its owner's device (through A's `tailscale serve`)."""
    return send(boxes.a.url, message, {"X-Forwarded-For": OWNERS_DESK, "Host": A_NODE})


def first(text: str) -> dict[str, Any]:
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}


def said_on_a(task: dict[str, Any]) -> str:
    """Every line A's task showed: its status messages kept in history, and its answer."""
    lines = [p.get("text", "") for m in task.get("history", []) for p in m["parts"]]
    return "\n".join([*lines, answer_text(task)])


def b_owner_allows(boxes: Boxes, b_task: Any) -> dict[str, Any]:
    """B's owner answers B's waiting prompt on B (B's local admin token)."""
    on_b = next(MessageToDict(p.data) for p in b_task.status.message.parts if p.HasField("data"))
    return send(boxes.b.url, allow(MessageToDict(b_task), on_b["requestId"]),
                {"Authorization": f"Bearer {boxes.b.token}"})  # fmt: skip


async def b_answers(boxes: Boxes, b_task_id: str) -> list[str]:
    """Who answered each permission prompt of B's task, as B's audit log says (read from
    B's store, as `tailagent audit` reads it: that command is not what is tested here)."""
    database = open_database(f"sqlite+aiosqlite:///{boxes.b.state_dir / 'tailagent.db'}")
    try:
        rows = await AuditLog(database).read()
    finally:
        await database.aclose()
    return [row.answered_by for row in rows if row.task_id == b_task_id]


async def test_a_s_owner_may_not_answer_alice_s_relayed_question(boxes: Boxes) -> None:
    task = as_alice(boxes, first("delegate:devbox-2 ask:dist"))
    asked = waiting_on(task)
    assert (asked["relayedFrom"], asked["relayedFor"]) == ("devbox-2", ALICE), asked

    refused = as_a_owner(boxes, allow(task, asked["requestId"]))
    assert refused["error"]["message"] == (
        f"{OWNER} may not answer this question: devbox-2's agent asks it of {ALICE}, in "
        f"work handed there for them, and only {ALICE} may answer it (the answer goes to "
        f"devbox-2 as theirs); task {task['id']} stays waiting for {ALICE}."
    ), refused
    # Refused on A before anything went to B: B's task still waits on its question.
    b_task = await peer_task_of(boxes, task)
    assert state_name_of(b_task) == "input_required"
    assert await b_answers(boxes, b_task.id) == []

    done = as_alice(boxes, allow(task, asked["requestId"]))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", said_on_a(done)
    assert state_name_of(await peer_task(boxes, b_task.id)) == "completed"
    [by] = await b_answers(boxes, b_task.id)
    assert by.startswith(f"user:{ALICE}") and "via devbox-1" in by, by


async def test_a_question_b_s_owner_answered_on_b_is_not_answered_again_from_a(
    boxes: Boxes,
) -> None:
    task = as_alice(boxes, first("delegate:devbox-2 ask:dist"))
    asked = waiting_on(task)
    b_task = await peer_task_of(boxes, task)
    answered = b_owner_allows(boxes, b_task)
    assert answered["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", answered

    # Her answer races A's next look at B (every 2 s at first): whichever comes first
    # holds the question, and each order ends in the same truth.
    reply = send(boxes.a.url, allow(task, asked["requestId"]),
                 {"X-Forwarded-For": LAPTOP, "Host": A_NODE})  # fmt: skip
    if "error" in reply:  # A saw first that B no longer asks: hers is refused, naming B
        closed = f"request {asked['requestId']} of task {task['id']} was already answered: "
        assert closed + "closed by devbox-2" in reply["error"]["message"], reply
        done = settled_on_a(boxes, task["id"])
    else:  # hers came first: A tried it on B, which had it answered already
        done = reply["result"]["task"]
        assert (
            "devbox-2's question was already answered or closed on devbox-2; "
            f"{ALICE}'s answer was not sent: devbox-2's agent asks to run `rm -rf dist`"
        ) in said_on_a(done), said_on_a(done)
    said = said_on_a(done)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", said
    assert "echo: ask:dist" in said, said  # B's outcome still came back to her task
    [by] = await b_answers(boxes, b_task.id)  # B's owner's answer alone: hers was never sent
    assert not by.startswith(f"user:{ALICE}"), by


def get_on_a(boxes: Boxes, task_id: str) -> dict[str, Any]:
    """GetTask on A from alice's laptop, with its history."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
    headers = {"A2A-Version": "1.0", "X-Forwarded-For": LAPTOP, "Host": A_NODE}
    reply: dict[str, Any] = httpx.post(boxes.a.url, json=body, headers=headers, timeout=30).json()
    return reply["result"]


def settled_on_a(boxes: Boxes, task_id: str, seconds: float = 20) -> dict[str, Any]:
    """A's task once it has ended, nobody answering on A (or as it is after `seconds`)."""
    deadline = time.monotonic() + seconds
    ended = {"TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED"}
    while True:
        task = get_on_a(boxes, task_id)
        if task["status"]["state"] in ended or time.monotonic() > deadline:
            return task
        time.sleep(0.2)


def asked_after(boxes: Boxes, task_id: str, request_id: str, seconds: float = 20) -> dict[str, Any]:
    """A's task once it asks something other than `request_id` (or as it is after
    `seconds`)."""
    deadline = time.monotonic() + seconds
    while True:
        task = get_on_a(boxes, task_id)
        waiting = task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        if (waiting and waiting_on(task)["requestId"] != request_id) or (
            time.monotonic() > deadline
        ):
            return task
        time.sleep(0.2)


def cancel_on_b(boxes: Boxes, task_id: str) -> dict[str, Any]:
    """B's owner cancels a task on B (B's local admin token)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": task_id}}
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {boxes.b.token}"}
    reply: dict[str, Any] = httpx.post(boxes.b.url, json=body, headers=headers, timeout=30).json()
    return reply


async def test_a_question_answered_on_b_is_taken_back_from_alice_on_a(boxes: Boxes) -> None:
    task = as_alice(boxes, first("delegate:devbox-2 ask:dist ask:cache"))
    asked = waiting_on(task)
    b_task = await peer_task_of(boxes, task)
    answered = b_owner_allows(boxes, b_task)
    assert answered["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"

    # Nobody answers on A: A stops asking B's first question, and asks its next one.
    now = asked_after(boxes, task["id"], asked["requestId"])
    said = said_on_a(now)
    assert "closed by devbox-2: answered or closed there, no longer asked here" in said, said
    assert (
        "devbox-2's question was answered or closed on devbox-2, so it is no longer asked "
        "here: devbox-2's agent asks to run `rm -rf dist`"
    ) in said, said
    second = waiting_on(now)
    assert "rm -rf cache" in second["title"], second
    # Her answer to the first, late, is refused naming who closed it; nothing reaches B.
    late = send(boxes.a.url, allow(task, asked["requestId"]),
                {"X-Forwarded-For": LAPTOP, "Host": A_NODE})  # fmt: skip
    closed = f"request {asked['requestId']} of task {task['id']} was already answered: "
    closed += "closed by devbox-2: answered or closed there"
    assert closed in late["error"]["message"], late
    # The question that is asked now is hers to answer, and the work ends as usual.
    done = as_alice(boxes, allow(task, second["requestId"]))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", said_on_a(done)
    assert "echo: ask:dist ask:cache" in said_on_a(done)
    by_owner, by_alice = await b_answers(boxes, b_task.id)
    assert not by_owner.startswith(f"user:{ALICE}"), by_owner
    assert by_alice.startswith(f"user:{ALICE}"), by_alice


async def test_a_question_whose_task_b_s_owner_cancelled_is_taken_back_on_a(
    boxes: Boxes,
) -> None:
    task = as_alice(boxes, first("delegate:devbox-2 ask:dist"))
    waiting_on(task)
    b_task = await peer_task_of(boxes, task)
    cancelled = cancel_on_b(boxes, b_task.id)
    assert cancelled["result"]["status"]["state"] == "TASK_STATE_CANCELED", cancelled

    done = settled_on_a(boxes, task["id"])
    said = said_on_a(done)
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", said  # the agent is told
    assert "closed by devbox-2" in said, said
    assert "devbox-2's task canceled" in said, said


async def test_a_hand_off_that_ends_in_error_cancels_b_s_task(tmp_path: Path) -> None:
    """B gives work handed in no approver role: alice's answer to B's question is refused
    by B, the hand-off ends in that error, and B's task is cancelled, not left waiting."""
    boxes = start(tmp_path, b_delegation='roles = ["caller"]\n')
    try:
        task = as_alice(boxes, first("delegate:devbox-2 ask:dist"))
        asked = waiting_on(task)
        done = as_alice(boxes, allow(task, asked["requestId"]))
        said = said_on_a(done)
        assert "may not answer permission prompts" in said, said
        b_task = await peer_task_of(boxes, task)
        assert state_name_of(b_task) == "canceled", state_name_of(b_task)
    finally:
        boxes.stop()


BOB = "bob@example.com"
BOBS_LAPTOP = "100.64.0.21"


def usage_rows(state_dir: Path) -> list[dict[str, Any]]:
    done = tailagent("usage", "--json", "--state-dir", str(state_dir))
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_two_people_handing_work_on_at_once_each_pay_for_their_own(tmp_path: Path) -> None:
    """alice and bob hand work to B at the same moment: on A each one's delegated cost is
    theirs alone, and on B each one's turn is theirs, via devbox-1."""
    boxes = start_boxes(
        tmp_path,
        a_sections=f'[access]\nallowed_logins = ["{ALICE}", "{BOB}"]\n',
        a_delegation='allow_peers = ["devbox-2"]\n',
        a_callers={LAPTOP: whois(ALICE, ip=LAPTOP), BOBS_LAPTOP: whois(BOB, ip=BOBS_LAPTOP)},
    )
    try:
        config = tmp_path / "b.toml"
        config.write_text(config.read_text().replace(f'["{ALICE}"]', f'["{ALICE}", "{BOB}"]'))
        boxes.restart_b()
        sends = [(LAPTOP, "delegate:devbox-2 alice's cost:0.25"),
                 (BOBS_LAPTOP, "delegate:devbox-2 bob's cost:0.5")]  # fmt: skip
        with ThreadPoolExecutor(2) as pool:
            replies = list(pool.map(lambda s: send(boxes.a.url, first(s[1]), {
                "X-Forwarded-For": s[0], "Host": A_NODE}), sends))  # fmt: skip
        for reply in replies:
            assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", reply
    finally:
        boxes.stop()
    on_a = {r["person"]: r["delegatedUsd"] for r in usage_rows(boxes.a.state_dir)}
    assert on_a == {ALICE: 0.25, BOB: 0.5}, on_a
    on_b = sorted((r["person"], r["via"], r["usd"]) for r in usage_rows(boxes.b.state_dir))
    assert on_b == [(ALICE, "devbox-1", 0.25), (BOB, "devbox-1", 0.5)], on_b
