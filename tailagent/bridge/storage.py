"""What the server keeps in its store, opened in order at start and closed in order
at stop: the tasks (a2a-sdk's DatabaseTaskStore behind the coalescing store), the
context -> agent session map, the audit log, and the signals between servers that
share a store.

Opening it is also where the last run's leftovers are settled: tasks it left working
are closed as failed, and tasks it left waiting for an answer are handed back to be
taken up again (see parked.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from a2a.server.tasks import DatabaseTaskStore
from a2a.types.a2a_pb2 import Task
from sqlalchemy.ext.asyncio import AsyncEngine

from tailagent.bridge.audit import AuditLog
from tailagent.bridge.parked import waiting_of
from tailagent.bridge.remote import TaskSignals
from tailagent.bridge.sqlite_writer import SqliteWriter, direct_writer
from tailagent.bridge.state import (
    SessionMap,
    close_unfinished_tasks,
    context_ids,
    index_contexts,
    server_id,
)
from tailagent.bridge.store import CoalescingTaskStore
from tailagent.config import Settings


@dataclass
class Storage:
    engine: AsyncEngine
    tasks: CoalescingTaskStore
    session_map: SessionMap
    audit: AuditLog
    signals: TaskSignals
    # The SQLite store's own writer (see sqlite_writer); None for PostgreSQL.
    direct: SqliteWriter | None
    # Tasks the last run left working, closed as failed now.
    closed: list[Task]
    # Tasks the last run left waiting for an answer, with their owners.
    waiting: list[tuple[Task, str]]
    _database: DatabaseTaskStore

    async def contexts(self) -> set[str]:
        """Every context the store has a task in (a worktree of any other is a leftover)."""
        return await context_ids(self._database)

    async def flush(self) -> None:
        """Writes what is still held in memory: the last task states, the session map."""
        await self.tasks.flush(final=True)
        await self.session_map.flush()

    async def aclose(self) -> None:
        if self.direct is not None:
            self.direct.close()
        await self.engine.dispose()


async def open_storage(
    settings: Settings,
    engine: AsyncEngine,
    on_change: Callable[[Task], None],
    on_save: Callable[[Task, str], None],
) -> Storage:
    """Opens everything kept in the store. `on_change` hears of every task state
    change (push notifications), `on_save` of every save with its owner (the desk)."""
    shared = settings.store is not None
    server = (server_id(settings.state_dir), settings.advertised_url)
    database = DatabaseTaskStore(engine)
    if shared:
        await index_contexts(database)
    closed, waiting = await close_unfinished_tasks(
        database, server[0], keep=lambda task: waiting_of(task) is not None
    )
    direct = direct_writer(engine, database.task_model)
    tasks = CoalescingTaskStore(
        database, server, on_change=on_change, shared=shared, direct=direct, on_save=on_save
    )
    signals = TaskSignals(engine)
    await signals.initialize()
    session_map = SessionMap(engine, direct)
    await session_map.initialize()
    audit = AuditLog(engine)
    await audit.initialize()
    return Storage(engine, tasks, session_map, audit, signals, direct, closed, waiting, database)
