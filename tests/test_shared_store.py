"""Two tailagent servers on one real PostgreSQL database (`--store`): a task made
through one is read, listed and cancelled through the other, the owner rules hold
across both, and a restart closes only the restarted server's own tasks."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import SendMessageRequest, TaskPushNotificationConfig
from a2a.utils.errors import A2AError

from tailagent.store.signals import POLL_INTERVAL
from tailagent.store.tasks import RETRY_DELAY
from tests.a2a_helpers import A2A, user_message
from tests.conftest import RunningServer, start_server
from tests.postgres import postgres_missing, running_postgres
from tests.test_cost import issue_token
from tests.test_push import receiving
from tests.test_resume_stream import events, message, number, rpc, state, text
from tests.test_tokens_and_owners import tailagent
from tests.warm_start import cli_run

MISSING = postgres_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    with running_postgres() as postgres:
        yield postgres.url


class Pair:
    """Servers A and B on one database, and the same two users on each."""

    def __init__(self, base: Path, database: str) -> None:
        self.base = base
        self.database = database
        self.a = self.start("a")
        self.b = self.start("b")
        self.tokens = {
            (user, server.state_dir.name): issue_token(server, user)
            for user in ("alice", "bob")
            for server in (self.a, self.b)
        }

    def start(self, name: str) -> RunningServer:
        directory = self.base / name
        directory.mkdir(exist_ok=True)
        config = directory / "tailagent.toml"
        config.write_text('[push]\nallowed_hosts = ["127.0.0.1"]\nretry_delay = 0.05\n')
        return start_server(
            directory, "--store", self.database, "--config", str(config),
            state_dir=directory / f"state-{name}",
        )  # fmt: skip

    def as_user(self, user: str, server: RunningServer) -> A2A:
        return A2A(server.url, self.tokens[(user, server.state_dir.name)])


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, database: str) -> Iterator[Pair]:
    servers = Pair(tmp_path_factory.mktemp("pair"), database)
    yield servers
    for server in (servers.a, servers.b):
        assert server.stop() == 0, server.log()


async def test_a_task_made_on_one_server_is_read_and_cancelled_through_the_other(
    pair: Pair,
) -> None:
    alice_a, alice_b = pair.as_user("alice", pair.a), pair.as_user("alice", pair.b)
    parked = await alice_a.turn("ask")
    assert parked.final_state == "input_required"

    seen = await alice_b.get(parked.task_id)
    assert seen.status.state == parked.statuses[-1].status.state
    assert seen.metadata["tailagentServerUrl"] == pair.a.url
    assert parked.task_id in [t.id for t in await alice_b.list()]

    # The agent waiting for this answer is on A: B says so rather than start a turn.
    with pytest.raises(A2AError, match=f"runs on another tailagent server.*{pair.a.url}"):
        await alice_b.turn(user_message("yes", task_id=parked.task_id))
    # Its events flow on A only: B says so rather than wait on a stream that never comes.
    with pytest.raises(A2AError, match=re.escape(f"({pair.a.url}); subscribe there")):
        await alice_b.subscribe(parked.task_id)

    cancelled = await alice_b.cancel(parked.task_id)
    assert cancelled.status.state == 5  # TASK_STATE_CANCELED
    assert (await alice_a.get(parked.task_id)).status.state == cancelled.status.state
    assert f"task {parked.task_id}: cancel, as another server asked" in pair.a.log()
    # A's context is free again: its next turn there runs.
    again = await alice_a.turn(user_message("hello", context_id=parked.context_id))
    assert again.final_state == "completed"


async def test_a_push_config_made_on_one_server_is_served_by_the_runner(pair: Pair) -> None:
    alice_a, alice_b = pair.as_user("alice", pair.a), pair.as_user("alice", pair.b)
    async with receiving() as receiver:
        parked = await alice_a.turn("ask")
        async with alice_b.client() as client:
            await client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=parked.task_id, url=receiver.url)
            )
        await asyncio.sleep(POLL_INTERVAL * 3)  # the signal reaches A
        await alice_a.cancel(parked.task_id)
        (delivery,) = await receiver.wait_for(1)
    assert delivery.state == "canceled"
    assert delivery.json["task"]["id"] == parked.task_id


async def test_a_context_busy_on_one_server_is_busy_on_the_other(pair: Pair) -> None:
    alice_a, alice_b = pair.as_user("alice", pair.a), pair.as_user("alice", pair.b)
    parked = await alice_a.turn("ask")
    busy = user_message("meanwhile", context_id=parked.context_id)
    with pytest.raises(A2AError, match=f"busy with task {parked.task_id}.*{pair.a.url}"):
        await alice_b.turn(busy)
    await alice_a.cancel(parked.task_id)
    later = await alice_b.turn(user_message("now", context_id=parked.context_id))
    assert later.final_state == "completed"


async def test_owner_rules_hold_across_both_servers(pair: Pair) -> None:
    alice_a, bob_b = pair.as_user("alice", pair.a), pair.as_user("bob", pair.b)
    parked = await alice_a.turn("ask")
    with pytest.raises(A2AError, match="not found"):
        await bob_b.get(parked.task_id)
    with pytest.raises(A2AError, match="not found"):
        await bob_b.cancel(parked.task_id)
    assert parked.task_id not in [t.id for t in await bob_b.list()]
    assert (await alice_a.get(parked.task_id)).status.state == 6  # still INPUT_REQUIRED
    await alice_a.cancel(parked.task_id)


async def test_a_restart_closes_only_the_restarted_servers_tasks(pair: Pair) -> None:
    alice_a = pair.as_user("alice", pair.a)
    on_a = await alice_a.turn("ask")
    on_b = await pair.as_user("alice", pair.b).turn("ask")
    async with pair.as_user("alice", pair.b).client() as client:
        stream = client.send_message(SendMessageRequest(message=user_message("slow 30")))
        working_id = (await anext(stream)).task.id
        await anext(stream)
        assert pair.b.stop() == 0
        with contextlib.suppress(Exception):  # the stream ends with B
            async for _ in stream:
                pass
    pair.b = pair.start("b")
    alice_b = pair.as_user("alice", pair.b)
    ended = await alice_b.get(working_id)
    assert ended.status.state == 4  # TASK_STATE_FAILED: its turn stopped with B
    assert (await alice_b.get(on_b.task_id)).status.state == 6  # waits on across B's restart
    assert (await alice_b.get(on_a.task_id)).status.state == 6  # A's, still waiting
    assert (await alice_b.cancel(on_a.task_id)).status.state == 5


async def test_decisions_on_both_servers_land_in_one_audit_log(pair: Pair) -> None:
    asked = {}
    for server in (pair.a, pair.b):
        admin = A2A(server.url, server.token)
        asked[server.url] = (await admin.turn("ask:cache")).task_id
        await admin.turn(user_message("no, keep it", task_id=asked[server.url]))
    result = tailagent("audit", "--json", "--store", pair.database)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert {r["task_id"] for r in rows if r["reason"] == "no, keep it"} == set(asked.values())


def test_a_store_that_cannot_be_reached_stops_the_start_with_one_line(tmp_path: Path) -> None:
    url = "postgresql://tailagent:secret@127.0.0.1:1/nowhere"
    done = cli_run(
        [sys.executable, "-m", "tailagent", "serve", "--agent", "echo", "--listen",
         "127.0.0.1:0", "--state-dir", str(tmp_path), "--store", url],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("tailagent: cannot open the store postgresql+asyncpg://tailagent:***@")
    assert "secret" not in done.stderr
    # A password on the command line is there for every user of the box to read.
    assert "the --store URL holds a password" in done.stderr
    assert "TAILAGENT_STORE or the config file" in done.stderr


def test_a_store_url_in_the_environment_is_not_warned_of(tmp_path: Path) -> None:
    """TAILAGENT_STORE is taken out of the environment block at start
    (process/secret_env.py), so a password there is not on show: no warning, and the
    same one-line stop."""
    env = {**os.environ, "TAILAGENT_STORE": "postgresql://tailagent:secret@127.0.0.1:1/nowhere"}
    done = cli_run(
        [sys.executable, "-m", "tailagent", "serve", "--agent", "echo", "--listen",
         "127.0.0.1:0", "--state-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 1
    assert "cannot open the store postgresql+asyncpg://tailagent:***@" in done.stderr
    assert "holds a password" not in done.stderr


def test_doctor_checks_the_store(pair: Pair, tmp_path: Path) -> None:
    def store_check(url: str) -> dict[str, object]:
        done = tailagent("doctor", "--agent", "echo", "--json", "--state-dir", str(tmp_path),
                         "--listen", "127.0.0.1:9", "--store", url)  # fmt: skip
        return next(c for c in json.loads(done.stdout) if c["name"] == "store")

    assert store_check(pair.database)["ok"] is True
    down = store_check("postgresql://postgres:pw@127.0.0.1:1/x")
    assert down["ok"] is False and "cannot open the store" in str(down["detail"])
    assert "pw" not in str(down["detail"])


async def test_a_database_outage_fails_requests_clearly_and_loses_nothing(tmp_path: Path) -> None:
    with running_postgres() as postgres:
        server = start_server(tmp_path, "--store", postgres.url)
        a2a = A2A(server.url, server.token)
        try:
            before = await a2a.turn("hello")
            parked = await a2a.turn("ask")
            postgres.stop()
            with pytest.raises(A2AError):  # a new task cannot be stored: refused whole
                await a2a.send("while the database is down")
            # The parked task lives in this process: its answer is taken, and its end
            # is written once the database is back.
            answered = await a2a.turn(user_message("yes", task_id=parked.task_id))
            assert answered.final_state == "completed"
            async with a2a.http() as http:
                assert (await http.get(server.url + "/healthz")).status_code == 200
            postgres.start()
            after = await a2a.turn("the database is back")
            assert after.final_state == "completed"
            await asyncio.sleep(RETRY_DELAY * 2)  # the refused write's next try
        finally:
            assert server.stop() == 0, server.log()
        assert "the store refused its TASK_STATE_COMPLETED state" in server.log()
        # A fresh server reads what the first one wrote: nothing lost, nothing stale.
        again = start_server(tmp_path / "again", "--store", postgres.url)
        try:
            reader = A2A(again.url, again.token)
            for task_id in (before.task_id, parked.task_id, after.task_id):
                assert (await reader.get(task_id)).status.state == 3  # TASK_STATE_COMPLETED
        finally:
            again.stop()


async def test_a_conversation_is_its_owners_on_every_server(pair: Pair) -> None:
    alice_a, bob_b = pair.as_user("alice", pair.a), pair.as_user("bob", pair.b)
    started = await alice_a.turn("on server a")
    assert started.final_state == "completed"
    with pytest.raises(A2AError, match=f"Conversation {started.context_id} not found"):
        await bob_b.turn(user_message("on server b", context_id=started.context_id))
    # A name nobody had: the first server to hear it gives it to its caller, for both.
    name = f"shared-{started.context_id[:8]}"
    assert (await bob_b.turn(user_message("mine", context_id=name))).final_state == "completed"
    with pytest.raises(A2AError, match=f"Conversation {name} not found"):
        await alice_a.turn(user_message("mine too", context_id=name))


def test_a_stream_cut_on_one_server_is_taken_up_on_the_other(pair: Pair) -> None:
    """Alice's turn runs on A; her stream drops and her client comes back through B,
    which serves what she missed and then the rest from the store, each event once."""

    def auth(server: RunningServer, **more: str) -> dict[str, str]:
        token = pair.tokens[("alice", server.state_dir.name)]
        return {"A2A-Version": "1.0", "Authorization": f"Bearer {token}", **more}

    first: list[dict[str, Any]] = []
    body = rpc("SendStreamingMessage", message("slow 3"))
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", pair.a.url, json=body, headers=auth(pair.a)) as stream:
            for event in events(stream):
                first.append(event)
                if "tick 1/3" in text(event):
                    break
        task_id = first[0]["task"]["id"]
        seen = [n for n in map(number, first) if n is not None]
        resume = auth(pair.b, **{"Last-Event-ID": str(seen[-1])})
        body = rpc("SubscribeToTask", {"id": task_id})
        with http.stream("POST", pair.b.url, json=body, headers=resume) as stream:
            again = list(events(stream))
    numbers = seen + [n for n in map(number, again) if n is not None]
    assert numbers == list(range(1, len(numbers) + 1)), again
    said = "".join(text(e) for e in first + again)
    assert [said.count(f"tick {t}/3") for t in (1, 2, 3)] == [1, 1, 1], said
    assert state(again[-1]) == "TASK_STATE_COMPLETED"
