"""Box A restarted while a delegated question waits: the link to the peer's task is kept,
and the answer given after the restart goes to the peer, not to A's reloaded agent.

Two real servers on loopback (tests/two_boxes.py): A is a real `serve` whose tailscaled
names alice's laptop as the caller, so her turn gets the delegation tools; B lets
devbox-1 hand work in for alice.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import Task

from tailagent.store.database import open_database
from tailagent.store.delegations import DelegationLinks
from tests.tailnet import whois
from tests.test_delegation_wire import peer_task, state_name_of
from tests.test_tokens_and_owners import tailagent
from tests.two_boxes import A_NODE, ALICE, Boxes, start_boxes

LAPTOP = "100.64.0.20"


def as_alice(boxes: Boxes, message: dict[str, Any]) -> dict[str, Any]:
    """A SendMessage to A from alice's laptop (through A's `tailscale serve`)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    headers = {"A2A-Version": "1.0", "X-Forwarded-For": LAPTOP, "Host": A_NODE}
    reply = httpx.post(boxes.a.url, json=body, headers=headers, timeout=60).json()
    assert "result" in reply, reply
    task: dict[str, Any] = reply["result"]["task"]
    return task


@pytest.fixture
def boxes(tmp_path: Path) -> Iterator[Boxes]:
    made = start_boxes(
        tmp_path,
        a_sections=f'[access]\nallowed_logins = ["{ALICE}"]\n',
        a_delegation='allow_peers = ["devbox-2"]\n',
        a_callers={LAPTOP: whois(ALICE, ip=LAPTOP)},
    )
    yield made
    made.stop()


def waiting_on(task: dict[str, Any]) -> dict[str, Any]:
    """The prompt an input-required task waits on (its data part)."""
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]
    data: dict[str, Any] = next(
        p["data"] for p in task["status"]["message"]["parts"] if "data" in p
    )
    return data


def allow(task: dict[str, Any], request_id: str) -> dict[str, Any]:
    data = {"kind": "permission_response", "decision": "allow", "requestId": request_id}
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "taskId": task["id"],
            "contextId": task["contextId"], "parts": [{"data": data}]}  # fmt: skip


def answer_text(task: dict[str, Any]) -> str:
    return "".join(
        part.get("text", "")
        for artifact in task.get("artifacts", [])
        if artifact["artifactId"] == "response"
        for part in artifact["parts"]
    )


async def test_an_answer_given_after_a_restart_goes_to_the_peer(boxes: Boxes) -> None:
    first = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
             "parts": [{"text": "delegate:devbox-2 ask:dist cost:0.5"}]}  # fmt: skip
    task = as_alice(boxes, first)
    asked = waiting_on(task)
    assert asked["title"] == "devbox-2's agent asks to run `rm -rf dist`", asked
    assert asked["requestId"].startswith("delegate-")

    boxes.restart_a()
    done = as_alice(boxes, allow(task, asked["requestId"]))

    # B's task took the answer as alice's (signed on A after its restart) and completed.
    b_task = await peer_task_of(boxes, done)
    assert state_name_of(b_task) == "completed"
    # A's reloaded agent is told the outcome; the echo acts out the peer's words, so
    # it now asks its own `rm -rf dist` (not the peer's: an id of its own).
    own = waiting_on(done)
    assert not own["requestId"].startswith("delegate-")
    done = as_alice(boxes, allow(done, own["requestId"]))
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done["status"]
    said = answer_text(done)
    assert "devbox-2 finished: echo: ask:dist cost:0.5" in said, said
    assert "tailagent restarted" in said, said
    # What B's task cost is alice's delegated cost on A, counted once.
    usage = tailagent("usage", "--json", "--state-dir", str(boxes.a.state_dir))
    assert usage.returncode == 0, usage.stderr
    (row,) = [json.loads(line) for line in usage.stdout.splitlines()]
    assert (row["person"], row["delegatedUsd"]) == (ALICE, 0.5), row


async def peer_task_of(boxes: Boxes, task: dict[str, Any]) -> Task:
    """B's task that A's task handed work to, as A's store keeps the link."""
    database = open_database(f"sqlite+aiosqlite:///{boxes.a.state_dir / 'tailagent.db'}")
    try:
        (link,) = await DelegationLinks(database).of_task(task["id"])
    finally:
        await database.aclose()
    return await peer_task(boxes, link.peer_task_id)
