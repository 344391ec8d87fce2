"""The direct SQLite writer against a2a-sdk's own store, on real SQLite files."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from a2a.server.context import ServerCallContext
from a2a.server.models import TaskModel
from a2a.server.tasks import DatabaseTaskStore
from a2a.types.a2a_pb2 import (
    Artifact,
    ListTasksRequest,
    Message,
    Part,
    Role,
    Task,
    TaskState,
    TaskStatus,
)
from sqlalchemy.ext.asyncio import create_async_engine

from tailagent.access.identity import OwnerUser
from tailagent.bridge.sqlite_writer import SqliteWriter, direct_writer
from tailagent.bridge.state import SessionMap, open_engine
from tailagent.bridge.store import CoalescingTaskStore

ALICE = ServerCallContext(user=OwnerUser("user:alice"))


class Database:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.engine = open_engine(f"sqlite+aiosqlite:///{path}")
        self.sdk = DatabaseTaskStore(self.engine)
        writer = direct_writer(self.engine, self.sdk.task_model)
        assert writer is not None
        self.writer: SqliteWriter = writer

    def rows(self) -> list[tuple[object, ...]]:
        with sqlite3.connect(self.path) as db:
            return db.execute("SELECT * FROM tasks ORDER BY id").fetchall()


@pytest.fixture
async def databases(tmp_path: Path) -> AsyncIterator[tuple[Database, Database]]:
    pair = (Database(tmp_path / "sdk.db"), Database(tmp_path / "direct.db"))
    for database in pair:
        await database.sdk.initialize()
    yield pair
    for database in pair:
        database.writer.close()
        await database.engine.dispose()


def full_task(task_id: str) -> Task:
    """A task with every column filled, non-ASCII text included."""
    status = TaskStatus(
        state=TaskState.TASK_STATE_INPUT_REQUIRED,
        message=Message(message_id="m2", role=Role.ROLE_AGENT, parts=[Part(text="Écrire ✓?")]),
    )
    status.timestamp.FromDatetime(datetime(2026, 11, 30, 13, 5, 7, 123456, tzinfo=UTC))
    task = Task(id=task_id, context_id="ctx-1", status=status)
    task.history.append(Message(message_id="m1", role=Role.ROLE_USER, parts=[Part(text="日本")]))
    task.artifacts.append(Artifact(artifact_id="a1", parts=[Part(text="diff")]))
    task.metadata.update({"kind": "prompt", "n": 3})
    return task


async def test_writes_the_row_the_sdk_store_writes(databases: tuple[Database, Database]) -> None:
    sdk, direct = databases
    bare = Task(id="t2", context_id="ctx-2", status=TaskStatus(state=TaskState.TASK_STATE_WORKING))
    for task in (full_task("t1"), bare):
        await sdk.sdk.save(task, ALICE)
        assert await direct.writer.save(task, "user:alice")
    assert direct.rows() == sdk.rows()
    assert len(direct.rows()) == 2
    # An update replaces the row as the SDK's merge does.
    done = full_task("t1")
    done.status.state = TaskState.TASK_STATE_COMPLETED
    await sdk.sdk.save(done, ALICE)
    assert await direct.writer.save(done, "user:alice")
    assert direct.rows() == sdk.rows()


async def test_the_sdk_store_reads_and_lists_what_it_wrote(
    databases: tuple[Database, Database],
) -> None:
    _, direct = databases
    task = full_task("t1")
    assert await direct.writer.save(task, "user:alice")
    assert await direct.sdk.get("t1", ALICE) == task
    listed = await direct.sdk.list(ListTasksRequest(), ALICE)
    assert [t.id for t in listed.tasks] == ["t1"]
    assert await direct.sdk.get("t1", ServerCallContext(user=OwnerUser("user:bob"))) is None


async def test_a_lock_let_go_within_the_short_waits_is_written_through(
    databases: tuple[Database, Database],
) -> None:
    _, direct = databases
    other = sqlite3.connect(direct.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    asyncio.get_running_loop().call_later(0.002, other.execute, "COMMIT")
    assert await direct.writer.save(full_task("t1"), "user:alice")
    other.close()
    assert [row[0] for row in direct.rows()] == ["t1"]


async def test_a_held_write_lock_is_reported_not_waited_for(
    databases: tuple[Database, Database],
) -> None:
    _, direct = databases
    other = sqlite3.connect(direct.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    assert not await direct.writer.save(full_task("t1"), "user:alice")
    assert not await direct.writer.write("DELETE FROM tasks", [(), ()])
    other.execute("COMMIT")
    other.close()
    assert direct.rows() == []
    assert await direct.writer.save(full_task("t1"), "user:alice")
    assert [row[0] for row in direct.rows()] == ["t1"]


async def test_the_store_saves_through_the_sdk_while_the_lock_stays_held(
    databases: tuple[Database, Database],
) -> None:
    """Longer than the writer's short waits: the save goes to a2a-sdk's store, which
    waits for the lock (busy_timeout), and is durable once it returns."""
    _, direct = databases
    store = CoalescingTaskStore(direct.sdk, direct=direct.writer)
    other = sqlite3.connect(direct.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    asyncio.get_running_loop().call_later(0.3, other.execute, "COMMIT")
    await store.save(full_task("t1"), ALICE)
    other.close()
    assert [row[0] for row in direct.rows()] == ["t1"]


async def test_session_map_writes_go_through_the_writer(tmp_path: Path) -> None:
    database = Database(tmp_path / "tailagent.db")
    sessions = SessionMap(database.engine, database.writer)
    await sessions.initialize()
    written: list[object] = []
    write = database.writer.write

    async def spy(sql: str, rows: list[dict[str, str]]) -> bool:
        written.extend(row["c"] for row in rows)
        return await write(sql, rows)

    database.writer.write = spy  # type: ignore[method-assign]
    await sessions.put("ctx-1", "echo", "s1")
    await sessions.put("ctx-2", "echo", "s2")
    await sessions.flush()
    with sqlite3.connect(database.path) as db:
        rows = db.execute("SELECT context_id, session_id FROM agent_sessions ORDER BY 1").fetchall()
    assert rows == [("ctx-1", "s1"), ("ctx-2", "s2")]
    assert sorted(written) == ["ctx-1", "ctx-2"]  # not through the engine's fallback
    reread = SessionMap(database.engine)
    assert await reread.get("ctx-2", "echo") == "s2"
    database.writer.close()
    await database.engine.dispose()


def test_no_writer_for_other_databases() -> None:
    memory = create_async_engine("sqlite+aiosqlite:///:memory:")
    assert direct_writer(memory, TaskModel) is None
    postgres = create_async_engine("postgresql+asyncpg://u:p@127.0.0.1:1/db")
    assert direct_writer(postgres, TaskModel) is None
