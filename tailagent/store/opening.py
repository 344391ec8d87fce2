"""What the server keeps in its store, opened in order at start and closed in order
at stop: the tasks (a2a-sdk's table, behind the coalescing store), the
context -> agent session map, who owns each conversation, the audit log, what each
person's work cost (cost/ledger.py), and the signals between servers that share a store.

Opening it is also where the last run's leftovers are settled: tasks it left working
are closed as failed, and tasks it left waiting for an answer are handed back to be
taken up again (see parked.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from a2a.types.a2a_pb2 import Task

from tailagent.bridge.answers.waiting import waiting_of
from tailagent.config import Settings
from tailagent.cost.ledger import Usage
from tailagent.store.audit import AuditLog
from tailagent.store.database import Database
from tailagent.store.owners import ConversationOwners
from tailagent.store.sdk_stores import SdkStores
from tailagent.store.signals import TaskSignals
from tailagent.store.state import SessionMap, close_unfinished_tasks, server_id
from tailagent.store.task_table import TaskTable
from tailagent.store.tasks import CoalescingTaskStore


@dataclass
class Storage:
    database: Database
    # a2a-sdk's own stores, opened when a request needs one (ListTasks, push configs).
    sdk: SdkStores
    tasks: CoalescingTaskStore
    session_map: SessionMap
    owners: ConversationOwners
    audit: AuditLog
    usage: Usage
    signals: TaskSignals
    # Tasks the last run left working, closed as failed now.
    closed: list[Task]
    # Tasks the last run left waiting for an answer, with their owners.
    waiting: list[tuple[Task, str]]
    _table: TaskTable

    async def contexts(self) -> set[str]:
        """Every context the store has a task in (a worktree of any other is a leftover)."""
        return await self._table.context_ids()

    async def close_unfinished(self, message: str) -> list[str]:
        """At stop: ends as failed, saying `message`, every task this process holds
        unfinished but those the next start takes back (`can_wait`), so that start finds
        none of them to close; returns the ids of those ended."""
        return await self.tasks.close_held(message, keep=can_wait)

    async def flush(self) -> None:
        """Writes what is still held in memory: the last task states, the session map."""
        await self.tasks.flush(final=True)
        await self.session_map.flush()

    async def aclose(self) -> None:
        await self.sdk.aclose()
        await self.database.aclose()


def can_wait(task: Task) -> bool:
    """Whether a task outlives a restart: it waits for an answer to a prompt the next
    start can read back (parked.py). A start keeps these and a stop leaves them, by this
    one rule, so a stop ends exactly what the next start would otherwise close."""
    return waiting_of(task) is not None


async def open_storage(
    settings: Settings,
    database: Database,
    sdk: SdkStores,
    on_change: Callable[[Task], None],
    on_save: Callable[[Task, str], None],
) -> Storage:
    """Opens everything kept in the store. `on_change` hears of every task state
    change (push notifications), `on_save` of every save with its owner (the desk)."""
    shared = settings.store is not None
    server = (server_id(settings.state_dir), settings.advertised_url)
    table = TaskTable(database, sdk)
    await table.create()
    if shared:
        await table.index_contexts()
    closed, waiting = await close_unfinished_tasks(table, server[0], keep=can_wait)
    tasks = CoalescingTaskStore(
        table, sdk, server, on_change=on_change, shared=shared, on_save=on_save
    )
    signals = TaskSignals(database)
    await signals.initialize()
    session_map = SessionMap(database)
    await session_map.initialize()
    owners = ConversationOwners(database)
    await owners.initialize()
    audit = AuditLog(database)
    await audit.initialize()
    usage = Usage(database)
    await usage.initialize()
    return Storage(
        database, sdk, tasks, session_map, owners, audit, usage, signals, closed, waiting, table
    )
