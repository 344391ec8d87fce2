"""The coalescing task store over a real SQLite file: what is durable when."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import ListTasksRequest, Task, TaskState, TaskStatus

from tailagent.store.database import open_database
from tailagent.store.opening import close_unfinished_tasks
from tailagent.store.sdk_stores import OwnerUser, SdkStores
from tailagent.store.table import TaskTable
from tailagent.store.tasks import UNSEEN_UNTIL_SETTLED, CoalescingTaskStore

if TYPE_CHECKING:  # imported for real only through SdkStores (see tailagent/mends/sql_stores.py)
    from a2a.server.tasks.database_task_store import DatabaseTaskStore

Stores = tuple[CoalescingTaskStore, "DatabaseTaskStore"]
ALICE = ServerCallContext(user=OwnerUser("user:alice"))
BOB = ServerCallContext(user=OwnerUser("user:bob"))


@dataclass
class Opened:
    store: CoalescingTaskStore
    # a2a-sdk's own store on the same file: what it reads is what any reader sees.
    reader: DatabaseTaskStore
    table: TaskTable
    sdk: SdkStores


@pytest.fixture
async def opened(tmp_path: Path) -> AsyncIterator[Opened]:
    """The store as the server builds it for SQLite."""
    database = open_database(f"sqlite+aiosqlite:///{tmp_path / 'tailagent.db'}")
    sdk = SdkStores(database)
    table = TaskTable(database, sdk)
    await table.create()
    yield Opened(CoalescingTaskStore(table, sdk), await sdk.tasks(), table, sdk)
    await sdk.aclose()
    await database.aclose()


@pytest.fixture
def stores(opened: Opened) -> Stores:
    return opened.store, opened.reader


def task(task_id: str, state: TaskState) -> Task:
    return Task(id=task_id, context_id="ctx", status=TaskStatus(state=state))


async def test_first_paused_and_final_saves_are_written_at_once(stores: Stores) -> None:
    store, database = stores
    await store.save(task("t1", TaskState.TASK_STATE_SUBMITTED), ALICE)
    assert (await database.get("t1", ALICE)).status.state == TaskState.TASK_STATE_SUBMITTED
    await store.save(task("t1", TaskState.TASK_STATE_INPUT_REQUIRED), ALICE)
    assert (await database.get("t1", ALICE)).status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    await store.save(task("t1", TaskState.TASK_STATE_COMPLETED), ALICE)
    assert (await database.get("t1", ALICE)).status.state == TaskState.TASK_STATE_COMPLETED


async def test_working_saves_are_coalesced_then_written(stores: Stores) -> None:
    store, database = stores
    await store.save(task("t2", TaskState.TASK_STATE_SUBMITTED), ALICE)
    working = task("t2", TaskState.TASK_STATE_WORKING)
    for n in range(5):
        working.metadata.update({"step": n})
        await store.save(working, ALICE)
    assert (await store.get("t2", ALICE)).metadata["step"] == 4  # served from memory
    assert (await database.get("t2", ALICE)).status.state == TaskState.TASK_STATE_SUBMITTED
    await asyncio.sleep(0.2)
    stored = await database.get("t2", ALICE)
    assert stored.status.state == TaskState.TASK_STATE_WORKING
    assert stored.metadata["step"] == 4


async def test_held_tasks_stay_owner_scoped(stores: Stores) -> None:
    store, _ = stores
    await store.save(task("t3", TaskState.TASK_STATE_SUBMITTED), ALICE)
    await store.save(task("t3", TaskState.TASK_STATE_WORKING), ALICE)
    assert await store.get("t3", BOB) is None
    assert await store.get("t3", ALICE) is not None


async def test_list_sees_deferred_saves(stores: Stores) -> None:
    store, _ = stores
    await store.save(task("t4", TaskState.TASK_STATE_SUBMITTED), ALICE)
    await store.save(task("t4", TaskState.TASK_STATE_WORKING), ALICE)
    listed = await store.list(ListTasksRequest(), ALICE)
    assert [(t.id, t.status.state) for t in listed.tasks] == [("t4", TaskState.TASK_STATE_WORKING)]


async def test_minted_ids_need_no_read(stores: Stores) -> None:
    store, _ = stores
    new_id = store.minted.generate()
    assert await store.get(new_id, ALICE) is None
    await store.save(task(new_id, TaskState.TASK_STATE_SUBMITTED), ALICE)
    assert new_id not in store.minted


async def test_restart_rule_fails_unfinished_tasks_of_every_owner(opened: Opened) -> None:
    store, database = opened.store, opened.reader
    await store.save(task("a", TaskState.TASK_STATE_WORKING), ALICE)
    await store.save(task("b", TaskState.TASK_STATE_INPUT_REQUIRED), BOB)
    await store.save(task("c", TaskState.TASK_STATE_COMPLETED), BOB)
    closed, kept = await close_unfinished_tasks(opened.table, "")
    assert len(closed) == 2 and kept == []
    assert (await database.get("a", ALICE)).status.state == TaskState.TASK_STATE_FAILED
    assert (await database.get("b", BOB)).status.state == TaskState.TASK_STATE_FAILED
    assert (await database.get("c", BOB)).status.state == TaskState.TASK_STATE_COMPLETED


async def test_restart_rule_keeps_the_tasks_it_is_told_can_be_taken_back(opened: Opened) -> None:
    store, database = opened.store, opened.reader
    await store.save(task("a", TaskState.TASK_STATE_WORKING), ALICE)
    await store.save(task("b", TaskState.TASK_STATE_INPUT_REQUIRED), BOB)
    waiting = lambda t: t.status.state == TaskState.TASK_STATE_INPUT_REQUIRED  # noqa: E731
    closed, kept = await close_unfinished_tasks(opened.table, "", keep=waiting)
    assert [t.id for t in closed] == ["a"] and [(t.id, o) for t, o in kept] == [("b", "user:bob")]
    assert (await database.get("b", BOB)).status.state == TaskState.TASK_STATE_INPUT_REQUIRED


async def test_restart_rule_leaves_another_servers_tasks_alone(opened: Opened) -> None:
    database = opened.reader
    mine = CoalescingTaskStore(opened.table, opened.sdk, ("server-a", "http://a.example"))
    theirs = CoalescingTaskStore(opened.table, opened.sdk, ("server-b", "http://b.example"))
    await mine.save(task("a", TaskState.TASK_STATE_WORKING), ALICE)
    await theirs.save(task("b", TaskState.TASK_STATE_INPUT_REQUIRED), ALICE)
    closed, _ = await close_unfinished_tasks(opened.table, "server-a")
    assert [t.id for t in closed] == ["a"]
    other = await database.get("b", ALICE)
    assert other.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert mine.runs_elsewhere(other) == "http://b.example"
    assert theirs.runs_elsewhere(other) is None  # its own


async def test_a_task_nobody_can_see_yet_is_first_written_when_it_settles(stores: Stores) -> None:
    """A blocking send with no push config shows its task only in the response, once
    final or waiting: its first save waits for that (or for the deferred writer)."""
    store, database = stores
    unseen = ServerCallContext(user=OwnerUser("user:alice"), state={UNSEEN_UNTIL_SETTLED: True})
    quick = store.minted.generate()
    await store.save(task(quick, TaskState.TASK_STATE_SUBMITTED), unseen)
    assert await database.get(quick, ALICE) is None
    assert (await store.get(quick, ALICE)).status.state == TaskState.TASK_STATE_SUBMITTED
    await store.save(task(quick, TaskState.TASK_STATE_COMPLETED), unseen)
    assert (await database.get(quick, ALICE)).status.state == TaskState.TASK_STATE_COMPLETED
    # A longer turn is written by the deferred writer all the same.
    longer = store.minted.generate()
    await store.save(task(longer, TaskState.TASK_STATE_SUBMITTED), unseen)
    await asyncio.sleep(0.2)
    assert (await database.get(longer, ALICE)).status.state == TaskState.TASK_STATE_SUBMITTED
    # An id this process did not mint (a task stored before) is written at once.
    await store.save(task("stored-before", TaskState.TASK_STATE_SUBMITTED), unseen)
    assert await database.get("stored-before", ALICE) is not None
