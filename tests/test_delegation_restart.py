"""Box A restarted while a delegated question waits: the link to the peer's task is kept,
and the answer given after the restart goes to the peer, not to A's reloaded agent.

Two real servers on loopback, as in tests/test_delegation_wire.py (its fake tailscaleds
and the forwarding proxy that plays the tailnet): A is a real `serve` whose tailscaled
names alice's laptop as the caller, so her turn gets the delegation tools; B lets
devbox-1 hand work in for alice.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import Task

from tailagent.store.database import open_database
from tailagent.store.delegations import DelegationLinks
from tests.conftest import RunningServer, start_server
from tests.tailnet import whois
from tests.tailnet_proxy import TailnetProxy
from tests.test_delegation_wire import (
    A_NODE,
    ALICE,
    B_NODE,
    NamedTailscaled,
    named,
    peer_task,
    port_of,
    state_name_of,
)
from tests.test_tokens_and_owners import tailagent

LAPTOP = "100.64.0.20"


@dataclass
class Boxes:
    a: RunningServer
    a_args: list[str]
    b: RunningServer
    proxy: TailnetProxy
    tmp: Path

    def restart_a(self) -> None:
        self.a.stop(signal.SIGTERM)
        self.a = start_server(self.tmp / "a", *self.a_args, state_dir=self.a.state_dir)
        self.proxy.routes[A_NODE] = port_of(self.a)

    def as_alice(self, message: dict[str, Any]) -> dict[str, Any]:
        """A SendMessage to A from alice's laptop (through A's `tailscale serve`)."""
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": message}}  # fmt: skip
        headers = {"A2A-Version": "1.0", "X-Forwarded-For": LAPTOP, "Host": A_NODE}
        reply = httpx.post(self.a.url, json=body, headers=headers, timeout=60).json()
        assert "result" in reply, reply
        task: dict[str, Any] = reply["result"]["task"]
        return task


@pytest.fixture
def boxes(tmp_path: Path) -> Iterator[Boxes]:
    proxy = TailnetProxy().start()
    fake_a: NamedTailscaled = named(tmp_path / "ts-a", A_NODE, peers=(B_NODE,))
    fake_a.peers[LAPTOP] = whois(ALICE, ip=LAPTOP)
    fake_a.start()
    fake_b = named(tmp_path / "ts-b", B_NODE)
    node_a = {"ID": 9, "Name": A_NODE + ".", "Addresses": ["100.64.0.9/32"], "Tags": ["tag:dev"]}
    profile = {"ID": 2, "LoginName": "tagged-devices", "DisplayName": "Tagged Devices"}
    fake_b.peers["100.64.0.9"] = {"Node": node_a, "UserProfile": profile, "CapMap": {}}
    fake_b.start()
    common = f'proxy = "{proxy.url}"\nscheme = "http"\nport = 80\n'
    access = f'[access]\nallowed_logins = ["{ALICE}"]\n'
    (tmp_path / "a.toml").write_text(f'{access}[delegation]\n{common}allow_peers = ["devbox-2"]\n')
    (tmp_path / "b.toml").write_text(
        f'{access}[delegation]\n{common}allowed_nodes = ["devbox-1"]\n'
    )
    a_args = ["--config", str(tmp_path / "a.toml"), "--public-url", f"http://{A_NODE}",
              "--tailscale-socket", str(fake_a.socket)]  # fmt: skip
    a = start_server(tmp_path / "a", *a_args)
    b = start_server(tmp_path / "b", "--config", str(tmp_path / "b.toml"), "--public-url",
                     f"http://{B_NODE}", "--tailscale-socket", str(fake_b.socket))  # fmt: skip
    proxy.routes.update({A_NODE: port_of(a), B_NODE: port_of(b)})
    proxy.forwarded_for[B_NODE] = "100.64.0.9"  # devbox-1, as B's serve would say
    made = Boxes(a, a_args, b, proxy, tmp_path)
    yield made
    made.a.stop()
    made.b.stop()
    fake_a.stop()
    fake_b.stop()
    proxy.stop()


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
    task = boxes.as_alice(first)
    asked = waiting_on(task)
    assert asked["title"] == "devbox-2's agent asks to run `rm -rf dist`", asked
    assert asked["requestId"].startswith("delegate-")

    boxes.restart_a()
    done = boxes.as_alice(allow(task, asked["requestId"]))

    # B's task took the answer as alice's (signed on A after its restart) and completed.
    b_task = await peer_task_of(boxes, done)
    assert state_name_of(b_task) == "completed"
    # A's reloaded agent is told the outcome; the echo acts out the peer's words, so
    # it now asks its own `rm -rf dist` (not the peer's: an id of its own).
    own = waiting_on(done)
    assert not own["requestId"].startswith("delegate-")
    done = boxes.as_alice(allow(done, own["requestId"]))
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
    return await peer_task(boxes, link.peer_task_id)  # type: ignore[arg-type] (reads .b)
