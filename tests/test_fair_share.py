"""No caller can starve the others, through real servers hosting tests/fake_acp_agent.py.

The attacks (issue 32): (1) a blocking SendMessage parked on a permission prompt, then
cancelled, read CANCELED while its agent process stayed held, with no audit row:
after agent.max_processes such cancels no conversation could start until a restart.
(2) One caller parked agent.max_processes tasks on prompts and everyone else was
refused. Now every cancel, however the task was sent and whether it waited or
worked, gives its process back, records the refused prompt and is pushed; and one
caller's tasks hold at most its share of the processes (admins are not counted).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import (
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import A2AError
from prometheus_client.parser import text_string_to_metric_families

from tests.a2a_helpers import A2A, state_name, texts, user_message
from tests.conftest import RunningServer, start_server
from tests.processes import children
from tests.tailnet import FakeTailscaled
from tests.test_acp import agent_command
from tests.test_conversation_owners import CAP, PEOPLE, V1, ip_of, result
from tests.test_push import Receiver, receiving
from tests.test_waiting_restart import audit_rows

SETTLE = 20.0
MAX_PROCESSES = 2
# How a task is sent: blocking with no push config (bridge/requests/quick.py runs it), blocking
# with one (the SDK runs it), streamed, and non-blocking (returnImmediately).
KINDS = ("blocking", "blocking-push", "streaming", "non-blocking")


@pytest.fixture(scope="module")
def pool_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("fair")
    config = tmp / "tailagent.toml"
    config.write_text(
        f"[agent]\nmax_processes = {MAX_PROCESSES}\nwarm_spares = 0\ncancel_timeout = 1\n"
        '[push]\nallowed_hosts = ["127.0.0.1"]\nretry_delay = 0.05\n'
    )
    server = start_server(tmp, "--agent-command", agent_command(), "--config", str(config))
    yield server
    assert server.stop() == 0, server.log()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with receiving() as made:
        yield made


async def send(agent: A2A, text: str, kind: str, push_url: str) -> None:
    """Sends `text` as a new task the way `kind` says, until its request ends."""
    config = SendMessageConfiguration(return_immediately=kind == "non-blocking")
    if kind == "blocking-push":
        config.task_push_notification_config.CopyFrom(TaskPushNotificationConfig(url=push_url))
    request = SendMessageRequest(message=user_message(text), configuration=config)
    async with agent.client(streaming=kind == "streaming") as client:
        async for _ in client.send_message(request):
            pass


async def task_of(agent: A2A, text: str, state: str) -> Task:
    """The task a send of `text` started, once it reads `state`."""
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline:
        for task in await agent.list():
            if task.history and texts(task.history[0]) == text:
                if state_name(task.status.state) == state:
                    return task
                assert state_name(task.status.state) in ("submitted", "working"), task.status
        await asyncio.sleep(0.1)
    raise AssertionError(f"no task for {text!r} reached {state}")


def held_sessions(server: RunningServer) -> float:
    """/metrics' count of agent sessions lent to a task (read as the admin)."""
    reply = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {server.token}"})
    for family in text_string_to_metric_families(reply.text):
        for sample in family.samples:
            if sample.name == "tailagent_agent_sessions_held":
                return float(sample.value)
    raise AssertionError("no tailagent_agent_sessions_held in /metrics")


def pushed_states(receiver: Receiver, task_id: str) -> list[str]:
    states = []
    for delivery in receiver.deliveries:
        body = delivery.json
        task = body.get("task") or {}
        if body.get("statusUpdate", {}).get("taskId", task.get("id")) == task_id:
            states.append(delivery.state)
    return states


@pytest.mark.parametrize("kind", KINDS)
async def test_every_cancel_gives_its_agent_process_back(
    pool_server: RunningServer, receiver: Receiver, kind: str
) -> None:
    agent = A2A(pool_server.url, pool_server.token)
    # More cancels than processes: each one that kept its process would lock out the next.
    plan = ["ask", "slow 30", "ask", "ask"]
    assert sum(p == "ask" for p in plan) > MAX_PROCESSES
    canceled: dict[str, str] = {}
    for step in plan:
        text = f"{step} {kind} {uuid.uuid4().hex[:8]}"
        sending = asyncio.create_task(send(agent, text, kind, receiver.url))
        state = "input_required" if step == "ask" else "working"
        task = await task_of(agent, text, state)
        if kind != "blocking-push":  # a push config added while the task runs
            async with agent.client() as client:
                await client.create_task_push_notification_config(
                    TaskPushNotificationConfig(task_id=task.id, url=receiver.url)
                )
        assert held_sessions(pool_server) == 1
        ended = await agent.cancel(task.id)
        assert state_name(ended.status.state) == "canceled"
        await asyncio.wait_for(sending, 10)  # a request still open for it ends too
        assert held_sessions(pool_server) == 0  # its process is free for the next one
        canceled[task.id] = step
    assert len(children(pool_server.process.pid)) <= MAX_PROCESSES
    # A new conversation still starts and finishes.
    after = (await agent.send(user_message(f"hello after {kind}"))).task
    assert state_name(after.status.state) == "completed", after.status
    # Each refused prompt is in the audit, refused by the one who cancelled.
    rows = {r["task_id"]: r for r in await audit_rows(pool_server) if r["task_id"] in canceled}
    assert set(rows) == {t for t, step in canceled.items() if step == "ask"}
    for row in rows.values():
        assert (row["decision"], row["reason"]) == ("deny", "task canceled")
        assert row["answered_by"].startswith("token:local")
    # And each cancel reached the task's push config.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if all("canceled" in pushed_states(receiver, t) for t in canceled):
            break
        await asyncio.sleep(0.1)
    for task_id in canceled:
        assert pushed_states(receiver, task_id)[-1] == "canceled", receiver.deliveries


# --- a share of the processes per caller ---------------------------------------------------


SHARED_MAX = 4  # the default share is half: 2
TEAM_CONFIG = f"""
[access]
allowed_logins = ["alice@example.com", "carol@example.com"]
login_roles = ["caller", "approver"]
capability = "{CAP}"
[agent]
max_processes = {SHARED_MAX}
warm_spares = 0
cancel_timeout = 1
"""


class People:
    """The tailnet people of the stand-in tailscaled, and the local admin, calling one
    server the way `tailscale serve` reaches it."""

    def __init__(self, server: RunningServer) -> None:
        self.server = server

    def headers(self, person: str) -> dict[str, str]:
        if person == "admin":
            return {**V1, "Authorization": f"Bearer {self.server.token}"}
        return {**V1, "X-Forwarded-For": ip_of(person)}

    async def rpc(self, person: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        async with httpx.AsyncClient(timeout=30) as http:
            reply = await http.post(self.server.url + "/", json=body, headers=self.headers(person))
        answer: dict[str, Any] = reply.json()
        return answer

    async def say(self, person: str, text: str) -> dict[str, Any]:
        """A blocking send of a new conversation; the task it answers with."""
        message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
        return result(await self.rpc(person, "SendMessage", {"message": message}))


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> Iterator[People]:
    tmp = tmp_path_factory.mktemp("share")
    fake = FakeTailscaled(tmp / "tailscaled").start()
    for person in PEOPLE:
        fake.peers[ip_of(person)] = PEOPLE[person]
    fake.write()
    config = tmp / "tailagent.toml"
    config.write_text(TEAM_CONFIG)
    server = start_server(tmp, "--agent-command", agent_command(), "--config", str(config),
                          "--tailscale-socket", str(fake.socket))  # fmt: skip
    yield People(server)
    assert server.stop() == 0, server.log()
    fake.stop()


def state(task: dict[str, Any]) -> str:
    return str(task["status"]["state"]).removeprefix("TASK_STATE_").lower()


def status_text(task: dict[str, Any]) -> str:
    return "".join(p.get("text", "") for p in task["status"]["message"]["parts"])


async def test_one_caller_filling_its_share_does_not_stop_another(people: People) -> None:
    share = SHARED_MAX // 2
    # The admin, whose box it is, is not held to a share.
    admins = [await people.say("admin", "ask") for _ in range(share + 1)]
    assert [state(t) for t in admins] == ["input_required"] * (share + 1)
    for task in admins:
        assert "result" in await people.rpc("admin", "CancelTask", {"id": task["id"]})
    alices = [await people.say("alice", "ask") for _ in range(share)]
    assert [state(t) for t in alices] == ["input_required"] * share
    # Past her share, alice is told why and how to free one; nothing of hers is started.
    before = len(children(people.server.process.pid))
    refused = await people.say("alice", "ask")
    assert state(refused) == "failed"
    why = status_text(refused)
    assert f"user:alice@example.com already holds {share} of the {SHARED_MAX}" in why
    assert f"agent.max_processes_per_caller = {share}" in why and "cancel one" in why
    assert len(children(people.server.process.pid)) == before
    # Bob still starts conversations, and they run to the end or wait for him.
    bobs = await people.say("bob", "hello from bob")
    assert state(bobs) == "completed", bobs["status"]
    parked = await people.say("bob", "ask")
    assert state(parked) == "input_required"
    # Bob names alice's waiting task: it is not found for him, and it waits on.
    foreign = await people.rpc("bob", "CancelTask", {"id": alices[0]["id"]})
    assert foreign["error"]["code"] == -32001, foreign
    still = result(await people.rpc("alice", "GetTask", {"id": alices[0]["id"]}))
    assert state(still) == "input_required"
    # A cancel frees a place in alice's share: she starts again.
    canceled = result(await people.rpc("alice", "CancelTask", {"id": alices[0]["id"]}))
    assert state(canceled) == "canceled"
    again = await people.say("alice", "hello again")
    assert state(again) == "completed", again["status"]
    for person, task in (*(("alice", t) for t in alices[1:]), ("bob", parked)):
        assert "result" in await people.rpc(person, "CancelTask", {"id": task["id"]})


async def test_a_cancel_after_a_restart_records_the_refused_prompt(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        asked = (await A2A(server.url, server.token).send(user_message("ask"))).task
        assert state_name(asked.status.state) == "input_required"
        server.stop()
        server = start_server(tmp_path, state_dir=server.state_dir)  # it waits on
        agent = A2A(server.url, server.token)
        ended = await agent.cancel(asked.id)
        assert state_name(ended.status.state) == "canceled"
        rows = [r for r in await audit_rows(server) if r["task_id"] == asked.id]
        assert [(r["decision"], r["reason"]) for r in rows] == [("deny", "task canceled")]
        answer = user_message("yes", task_id=asked.id)
        with pytest.raises(A2AError, match="has already been canceled"):
            await agent.send(answer)
    finally:
        server.stop()
