"""No caller grows the store without bound (issue 55): through real servers, one person
past `tasks_kept_per_caller` keeps at most that many tasks, the oldest ended ones going
first, never one that waits for an answer; a new task their unfinished ones leave no
room for is refused, naming the limit; another person is untouched. Past
`events_kept_per_caller` the oldest ended tasks lose their events, not their rows.
Ended tasks expire after `ended_tasks_kept_hours`. /metrics and doctor show the size.
On SQLite, and the task limits on a shared PostgreSQL too."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.types.a2a_pb2 import TaskState
from a2a.utils.errors import A2AError

from tests.a2a_helpers import A2A
from tests.conftest import RunningServer, start_server
from tests.postgres import postgres_missing, running_postgres
from tests.test_cost import issue_token
from tests.test_push import receiving, send_with_push
from tests.test_tokens_and_owners import tailagent

LIMIT = 3
# The limited servers also take push configs to 127.0.0.1, for the test of what a
# removed task takes with it; nothing else of theirs pushes.
LIMITED = f'tasks_kept_per_caller = {LIMIT}\n[push]\nallowed_hosts = ["127.0.0.1"]\n'


def serve(tmp: Path, config: str, *extra: str) -> RunningServer:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "tailagent.toml"
    path.write_text(config)
    return start_server(tmp, "--config", str(path), *extra)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> Iterator[tuple[str, ...]]:
    """The server's store arguments: its own SQLite, or a fresh PostgreSQL."""
    if request.param == "sqlite":
        yield ()
        return
    missing = postgres_missing()
    if missing is not None:
        pytest.skip(missing)
    with running_postgres() as postgres:
        yield ("--store", postgres.url)


@pytest.fixture(scope="module")
def limited_on_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server whose people keep 3 tasks each, on its own SQLite: one for the module,
    as the limit is a person's and each test calls it as people of its own."""
    server = serve(tmp_path_factory.mktemp("limited"), LIMITED)
    yield server
    assert server.stop() == 0, server.log()


@pytest.fixture(scope="module")
def limited_on_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The same on a fresh PostgreSQL, shared the same way."""
    missing = postgres_missing()
    if missing is not None:
        pytest.skip(missing)
    with running_postgres() as postgres:
        server = serve(tmp_path_factory.mktemp("limited-pg"), LIMITED, "--store", postgres.url)
        yield server
        assert server.stop() == 0, server.log()


@pytest.fixture(params=["sqlite", "postgres"])
def limited(request: pytest.FixtureRequest) -> RunningServer:
    """A server whose people keep 3 tasks each, on either store."""
    server: RunningServer = request.getfixturevalue(f"limited_on_{request.param}")
    return server


async def kept(person: A2A) -> list[str]:
    """The ids of the person's tasks the store holds, oldest first."""
    return [task.id for task in reversed(await person.list())]


async def waiting_task(person: A2A, name: str) -> str:
    asked = await person.turn(f"ask:{name}")
    assert asked.final_state == "input_required", asked.kinds
    return asked.task_id


async def ended_task(person: A2A) -> str:
    done = await person.turn("hello")
    assert done.final_state == "completed", done.kinds
    return done.task_id


async def test_past_the_task_limit_the_oldest_ended_go_and_a_waiting_one_stays(
    limited: RunningServer,
) -> None:
    alice = A2A(limited.url, issue_token(limited, "alice", "caller"))
    bob = A2A(limited.url, issue_token(limited, "bob", "caller"))
    bobs = [await ended_task(bob) for _ in range(2)]
    asked = await waiting_task(alice, "first")  # her oldest task, never removed
    done = [await ended_task(alice) for _ in range(5)]
    assert await kept(alice) == [asked, *done[-2:]]
    with pytest.raises(A2AError, match="not found"):
        await alice.get(done[0])
    assert (await alice.get(asked)).status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert await kept(bob) == bobs  # another person's tasks are untouched
    # Waiting tasks push out her ended ones; past them, the limit is met and named.
    more = [await waiting_task(alice, name) for name in ("second", "third")]
    assert await kept(alice) == [asked, *more]
    limit = re.escape(f"(tasks_kept_per_caller = {LIMIT})")
    with pytest.raises(A2AError, match=f"3 tasks still running or waiting.*{limit}"):
        await alice.turn("hello")
    with pytest.raises(A2AError, match=limit):  # a blocking send, run on the quick path
        await alice.send("hello")
    assert await kept(alice) == [asked, *more]
    assert len(await kept(bob)) == 2 and await ended_task(bob)  # bob still has room


async def test_starts_at_once_admit_no_more_than_the_limit(limited: RunningServer) -> None:
    """One person's starts that all arrive at once are checked one after another: of
    six, as many as the limit leaves room for are admitted, and the rest refused."""
    alice = A2A(limited.url, issue_token(limited, "alice-at-once", "caller"))
    asked = await waiting_task(alice, "first")  # room for LIMIT - 1 more, none ended

    async def start(i: int) -> str:  # each waits for an answer: none can give way
        if i % 2:
            return (await alice.turn(f"ask:at-once-{i}")).task_id
        sent = await alice.send(f"ask:at-once-{i}")  # a blocking send, the quick path
        assert sent.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, sent
        return str(sent.task.id)

    starts = await asyncio.gather(*(start(i) for i in range(6)), return_exceptions=True)
    admitted = [s for s in starts if isinstance(s, str)]
    refused = [s for s in starts if not isinstance(s, str)]
    assert len(admitted) == LIMIT - 1, starts
    limit = f"(tasks_kept_per_caller = {LIMIT})"
    assert all(isinstance(r, A2AError) and limit in str(r) for r in refused), refused
    assert sorted(await kept(alice)) == sorted([asked, *admitted])


def events_of(server: RunningServer, task_ids: list[str]) -> list[int]:
    with sqlite3.connect(server.state_dir / "tailagent.db") as db:
        return [
            db.execute("SELECT COUNT(*) FROM task_events WHERE task_id = ?", (t,)).fetchone()[0]
            for t in task_ids
        ]


def rows_of(server: RunningServer, task_id: str) -> dict[str, list[tuple[str, ...]]]:
    """The rows that name the task in each table that may hold some of it."""
    tables = ("task_events", "task_signals", "push_notification_configs", "delegation_links",
              "audit_log")  # fmt: skip
    with sqlite3.connect(server.state_dir / "tailagent.db") as db:
        return {
            table: db.execute(f"SELECT * FROM {table} WHERE task_id = ?", (task_id,)).fetchall()
            for table in tables
        }


def link(db: sqlite3.Connection, task_id: str, context_id: str, peer_task: str, at: str) -> None:
    db.execute(
        "INSERT INTO delegation_links (task_id, peer_url, peer_task_id, peer_context_id,"
        " context_id, created_at) VALUES (?, 'http://peer', ?, 'peer-context', ?, ?)",
        (task_id, peer_task, context_id, at),
    )


async def test_a_removed_task_takes_what_served_only_it(
    limited_on_sqlite: RunningServer,
) -> None:
    """Its events, signals and push configs go with it; its delegation links go once a
    newer one of its conversation supersedes them (the newest continues the peer's
    conversation); its audit rows stay."""
    server = limited_on_sqlite
    alice = A2A(server.url, issue_token(server, "alice-removed", "caller"))
    async with receiving() as receiver:
        first = await send_with_push(alice, "hello", receiver.url)
        assert first.final_state == "completed", first.kinds
        oldest, second, *_ = [first.task_id] + [await ended_task(alice) for _ in range(2)]
        contexts = [(await alice.get(task)).context_id for task in (oldest, second)]
        await asyncio.sleep(0.3)  # the events are written
        with sqlite3.connect(server.state_dir / "tailagent.db") as db:
            link(db, oldest, contexts[0], "p1", "2026-01-01T00:00:00")
            # a later task of the same conversation handed work on: it supersedes p1
            link(db, "a-later-task", contexts[0], "p2", "2026-01-02T00:00:00")
            link(db, second, contexts[1], "p3", "2026-01-01T00:00:00")  # its newest
            db.execute("INSERT INTO task_signals VALUES (?, 'cancel', 'now')", (oldest,))
            db.execute(
                "INSERT INTO audit_log (at, task_id, context_id, tool, input, decision,"
                " reason, answered_by) VALUES ('now', ?, ?, 'Bash', 'ls', 'allow', '',"
                " 'alice')",
                (oldest, contexts[0]),
            )
        before = rows_of(server, oldest)
        assert all(before.values()), before
        for _ in range(2):  # past the limit: the oldest two go
            await ended_task(alice)
        assert {oldest, second}.isdisjoint(await kept(alice))
        after = rows_of(server, oldest)
        assert after["task_events"] == after["task_signals"] == [], after
        assert after["push_notification_configs"] == after["delegation_links"] == [], after
        assert after["audit_log"] == before["audit_log"]
        assert [row[2] for row in rows_of(server, second)["delegation_links"]] == ["p3"]
        assert len(rows_of(server, "a-later-task")["delegation_links"]) == 1


async def test_past_the_event_limit_the_oldest_ended_tasks_lose_their_events(
    tmp_path: Path,
) -> None:
    server = serve(tmp_path, "events_kept_per_caller = 20\n")
    try:
        alice = A2A(server.url, issue_token(server, "alice", "caller"))
        done = []
        for _ in range(8):
            done.append(await ended_task(alice))
            await asyncio.sleep(0.3)  # the events are written before the next task starts
        counts = events_of(server, done)
        each = counts[-1]
        assert 0 < each < 20, counts
        assert sum(counts) <= 19 + each, counts
        assert counts[0] == 0 and counts[-2:] == [each, each], counts  # oldest first
        assert await kept(alice) == done  # the tasks themselves stay
    finally:
        assert server.stop() == 0, server.log()


async def test_ended_tasks_expire_and_waiting_ones_do_not(
    store: tuple[str, ...], tmp_path: Path
) -> None:
    age = 2.0  # seconds
    server = serve(tmp_path, f"ended_tasks_kept_hours = {age / 3600}\n", *store)
    try:
        alice = A2A(server.url, issue_token(server, "alice", "caller"))
        asked = await waiting_task(alice, "stays")
        done = await ended_task(alice)
        await asyncio.sleep(0.3)  # its events are written
        if not store:
            assert events_of(server, [done])[0] > 0
        deadline = time.monotonic() + 30
        while done in await kept(alice):
            assert time.monotonic() < deadline, "the ended task never expired"
            await asyncio.sleep(0.2)
        if not store:
            assert events_of(server, [done]) == [0]
        await asyncio.sleep(age)  # the waiting task is well past the age, and stays
        assert await kept(alice) == [asked]
        assert "removed 1 ended task(s) older than" in server.log()
    finally:
        assert server.stop() == 0, server.log()


def test_metrics_and_doctor_show_the_stores_size(tmp_path: Path) -> None:
    server = serve(tmp_path, "")
    try:
        alice = A2A(server.url, issue_token(server, "alice", "caller"))
        asyncio.run(ended_task(alice))
        time.sleep(0.3)
        with sqlite3.connect(server.state_dir / "tailagent.db") as db:
            tasks = db.execute("SELECT COUNT(*) FROM tasks").fetchone()[0]
            events = db.execute("SELECT COUNT(*) FROM task_events").fetchone()[0]
        assert tasks == 1 and events > 0
        auth = {"Authorization": f"Bearer {server.token}"}
        metrics = httpx.get(f"{server.url}/metrics", headers=auth).text
        size = re.search(r"^tailagent_store_bytes ([0-9.e+]+)$", metrics, re.M)
        assert size is not None and float(size.group(1)) > 0, metrics
        assert f'tailagent_store_rows{{table="tasks"}} {float(tasks)}' in metrics
        assert f'tailagent_store_rows{{table="task_events"}} {float(events)}' in metrics
        done = tailagent("doctor", "--agent", "echo", "--json", "--state-dir",
                         str(server.state_dir))  # fmt: skip
        store = next(c for c in json.loads(done.stdout) if c["name"] == "store")
        assert store["ok"] is True, store
        assert (store["tasks"], store["events"]) == (str(tasks), str(events)), store
        assert f"MiB, {tasks} tasks, {events} task events" in str(store["detail"]), store
    finally:
        assert server.stop() == 0, server.log()
