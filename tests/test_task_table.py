"""tailagent's own statements on a2a-sdk's tasks table, against the SDK's own store,
on real SQLite files."""

from __future__ import annotations

import asyncio
import contextlib
import math
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from a2a.server.context import ServerCallContext
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
from google.protobuf.json_format import MessageToDict, SerializeToJsonError

from tailagent.store import database as database_module
from tailagent.store.database import (
    SqliteDatabase,
    StoreBusy,
    StoreUnavailable,
    open_database,
    redacted,
)
from tailagent.store.sdk_stores import OwnerUser, SdkStores
from tailagent.store.session_map import SessionMap
from tailagent.store.table import TaskTable, row_of
from tailagent.store.tasks import CoalescingTaskStore

if TYPE_CHECKING:  # imported for real only through SdkStores (see tailagent/mends/sql_stores.py)
    from a2a.server.tasks.database_task_store import DatabaseTaskStore

ALICE = ServerCallContext(user=OwnerUser("user:alice"))


@dataclass
class Store:
    path: Path
    database: SqliteDatabase
    table: TaskTable
    sdk: DatabaseTaskStore
    sdk_stores: SdkStores

    def rows(self) -> list[tuple[object, ...]]:
        with sqlite3.connect(self.path) as db:
            return db.execute("SELECT * FROM tasks ORDER BY id").fetchall()

    def schema(self) -> list[object]:
        """Columns and indexes as SQLite describes them (not the DDL's spelling)."""
        with sqlite3.connect(self.path) as db:
            columns = db.execute("PRAGMA table_info(tasks)").fetchall()
            indexes = sorted(db.execute("PRAGMA index_list(tasks)"), key=lambda i: i[1])
            keys = [db.execute(f"PRAGMA index_info({i[1]})").fetchall() for i in indexes]
        return [columns, [(i[1], i[2]) for i in indexes], keys]


async def open_store(path: Path, made_by_sdk: bool) -> Store:
    database = open_database(f"sqlite+aiosqlite:///{path}")
    assert isinstance(database, SqliteDatabase)
    stores = SdkStores(database)
    table = TaskTable(database, stores)
    if not made_by_sdk:
        await table.create()  # before the SDK's store opens: the table is ours
    return Store(path, database, table, await stores.tasks(), stores)


@pytest.fixture
async def stores(tmp_path: Path) -> AsyncIterator[tuple[Store, Store]]:
    """One file whose table a2a-sdk made, one whose table tailagent made."""
    pair = (
        await open_store(tmp_path / "sdk.db", made_by_sdk=True),
        await open_store(tmp_path / "own.db", made_by_sdk=False),
    )
    yield pair
    for store in pair:
        await store.sdk_stores.aclose()
        await store.database.aclose()


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
    # Every kind of value a Struct holds, nested: the row is cut from one rendering.
    deep = {"list": [1.5, "x", None, True, {"k": []}], "empty": {}}
    task.metadata.update({"kind": "prompt", "n": 3, "none": None, "flag": False, "deep": deep})
    return task


async def test_makes_the_table_the_sdk_makes(stores: tuple[Store, Store]) -> None:
    sdk, own = stores
    assert own.schema() == sdk.schema()
    assert len(own.schema()[1]) == 3  # the primary key's, and the SDK's two indexes


async def test_writes_the_row_the_sdk_store_writes(stores: tuple[Store, Store]) -> None:
    sdk, own = stores
    bare = Task(id="t2", context_id="ctx-2", status=TaskStatus(state=TaskState.TASK_STATE_WORKING))
    for task in (full_task("t1"), bare):
        await sdk.sdk.save(task, ALICE)
        await own.table.save(task, "user:alice")
    assert own.rows() == sdk.rows()
    assert len(own.rows()) == 2
    # An update replaces the row as the SDK's merge does.
    done = full_task("t1")
    done.status.state = TaskState.TASK_STATE_COMPLETED
    await sdk.sdk.save(done, ALICE)
    await own.table.save(done, "user:alice")
    assert own.rows() == sdk.rows()
    # A number JSON cannot hold is refused, as the SDK's conversion refuses it.
    done.metadata.update({"cost": math.inf})
    with pytest.raises(ValueError):
        await sdk.sdk.save(done, ALICE)
    with pytest.raises(SerializeToJsonError):  # MessageToDict's own refusal, of the task
        await own.table.save(done, "user:alice")


def test_a_row_is_the_same_from_a_rendering_at_hand_or_its_own() -> None:
    """A quick send's settled row is cut from the task's whole rendering (the answer's
    too); every other row renders its parts itself, the metadata faster: the same row."""
    bare = Task(id="t2", context_id="ctx-2", status=TaskStatus(state=TaskState.TASK_STATE_WORKING))
    for task in (full_task("t1"), bare):
        assert row_of(task, "user:alice") == row_of(task, "user:alice", MessageToDict(task))
    refused = full_task("t3")
    refused.metadata.update({"deep": {"cost": -math.inf}})
    with pytest.raises(SerializeToJsonError):
        row_of(refused, "user:alice")
    with pytest.raises(SerializeToJsonError):
        MessageToDict(refused)


async def test_each_reads_and_lists_what_the_other_wrote(stores: tuple[Store, Store]) -> None:
    sdk, own = stores
    task = full_task("t1")
    await own.table.save(task, "user:alice")
    assert await own.sdk.get("t1", ALICE) == task
    listed = await own.sdk.list(ListTasksRequest(), ALICE)
    assert [t.id for t in listed.tasks] == ["t1"]
    assert await own.sdk.get("t1", ServerCallContext(user=OwnerUser("user:bob"))) is None
    await sdk.sdk.save(task, ALICE)
    assert await sdk.table.get("t1", "user:alice") == task
    assert await sdk.table.get("t1", "user:bob") is None
    assert await sdk.table.owner_of("t1") == "user:alice"
    assert await sdk.table.recent(None, 10) == [(task, "user:alice")]
    await sdk.table.delete("t1", "user:bob")  # not bob's to delete
    assert await sdk.sdk.get("t1", ALICE) == task
    await sdk.table.delete("t1", "user:alice")
    assert await sdk.sdk.get("t1", ALICE) is None


async def test_a_lock_let_go_within_the_short_waits_is_written_through(
    stores: tuple[Store, Store],
) -> None:
    _, own = stores
    other = sqlite3.connect(own.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    asyncio.get_running_loop().call_later(0.02, other.execute, "COMMIT")
    await own.table.save(full_task("t1"), "user:alice")
    other.close()
    assert [row[0] for row in own.rows()] == ["t1"]


async def test_a_lock_held_through_every_try_is_an_error_and_writes_nothing(
    stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, own = stores
    monkeypatch.setattr(database_module, "TRIES", 4)
    other = sqlite3.connect(own.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with pytest.raises(StoreBusy, match="stayed locked"):
        await own.table.save(full_task("t1"), "user:alice")
    with pytest.raises(StoreBusy):
        await own.database.execute("DELETE FROM tasks WHERE id = :id", [{"id": "a"}, {"id": "b"}])
    other.execute("COMMIT")
    other.close()
    assert own.rows() == []
    await own.table.save(full_task("t1"), "user:alice")
    assert [row[0] for row in own.rows()] == ["t1"]


async def test_the_store_keeps_a_state_the_database_refused_and_writes_it_later(
    stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn's end while another process holds the lock: the turn is not failed, and
    its state lands once the lock goes."""
    _, own = stores
    monkeypatch.setattr(database_module, "TRIES", 3)
    store = CoalescingTaskStore(own.table, own.sdk_stores)
    await store.save(full_task("t1"), ALICE)
    other = sqlite3.connect(own.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    done = full_task("t1")
    done.status.state = TaskState.TASK_STATE_COMPLETED
    await store.save(done, ALICE)
    assert (await store.get("t1", ALICE)).status.state == TaskState.TASK_STATE_COMPLETED
    other.execute("COMMIT")
    other.close()
    for _ in range(40):
        stored = await own.sdk.get("t1", ALICE)
        if stored.status.state == TaskState.TASK_STATE_COMPLETED:
            break
        await asyncio.sleep(0.1)
    assert stored.status.state == TaskState.TASK_STATE_COMPLETED


async def test_session_map_round_trip(tmp_path: Path) -> None:
    database = open_database(f"sqlite+aiosqlite:///{tmp_path / 'tailagent.db'}")
    sessions = SessionMap(database)
    await sessions.initialize()
    await sessions.put("ctx-1", "echo", "s1")
    await sessions.put("ctx-2", "echo", "s2")
    await sessions.flush()
    with sqlite3.connect(tmp_path / "tailagent.db") as db:
        rows = db.execute("SELECT context_id, session_id FROM agent_sessions ORDER BY 1").fetchall()
    assert rows == [("ctx-1", "s1"), ("ctx-2", "s2")]
    reread = SessionMap(database)
    assert await reread.get("ctx-2", "echo") == "s2"
    assert await reread.get("ctx-2", "claude") is None  # another agent's session
    await database.aclose()


async def test_the_log_reaches_the_database_file_off_the_event_loop(tmp_path: Path) -> None:
    """The loop's commits only append to the write-ahead log; the checkpointer's thread
    copies them into the database file within a moment of them."""
    path = tmp_path / "tailagent.db"
    database = open_database(f"sqlite+aiosqlite:///{path}")
    assert isinstance(database, SqliteDatabase)
    await database.execute("CREATE TABLE t (n INTEGER)")
    await database.execute("INSERT INTO t VALUES (:n)", [{"n": n} for n in range(5000)])
    # Read as the file alone holds it (immutable: the log is left out).
    file_only = f"file:{path}?immutable=1"
    for _ in range(50):
        await asyncio.sleep(0.1)
        with (
            contextlib.closing(sqlite3.connect(file_only, uri=True)) as db,
            contextlib.suppress(sqlite3.OperationalError),  # no table in the file yet
        ):
            if db.execute("SELECT COUNT(*) FROM t").fetchone() == (5000,):
                break
    else:
        raise AssertionError("the rows never reached the database file")
    await database.aclose()


def test_store_urls() -> None:
    with pytest.raises(StoreUnavailable, match="names no file"):
        open_database("sqlite+aiosqlite:///:memory:")
    with pytest.raises(StoreUnavailable, match="names no file"):
        open_database("sqlite+aiosqlite://")
    assert (
        redacted("postgresql+asyncpg://u:secret@db:5432/x")
        == "postgresql+asyncpg://u:***@db:5432/x"
    )
    assert redacted("postgresql+asyncpg://db/x") == "postgresql+asyncpg://db/x"
