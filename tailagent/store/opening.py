"""What the server keeps in its store, opened in order at start and closed in order
at stop: the tasks (a2a-sdk's table, behind the coalescing store), the
context -> agent session map, who owns each conversation, the audit log, and the
signals between servers that share a store, and the peer tasks this node's tasks
handed work to. What each person's work cost is kept in
the same database, but opened by its own room (cost/ledger.py).

Opening it is also where the last run's leftovers are settled: tasks it left working
are closed as failed, and tasks the caller's `keep` says the next start takes back
(those waiting for an answer) are handed back to be taken up again.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from a2a.types.a2a_pb2 import Task

from tailagent.config import Settings
from tailagent.statedir.files import write_private
from tailagent.store.audit import AuditLog
from tailagent.store.database import Database
from tailagent.store.delegations import DelegationLinks
from tailagent.store.events import TaskEvents
from tailagent.store.finality import BUSY_STATES, mark_failed
from tailagent.store.keeping import Limits, TaskKeeping
from tailagent.store.owners import ConversationOwners
from tailagent.store.sdk_stores import SdkStores
from tailagent.store.session_map import SessionMap
from tailagent.store.signals import TaskSignals
from tailagent.store.table import TaskTable
from tailagent.store.tasks import SERVER_ID_KEY, CoalescingTaskStore

log = logging.getLogger(__name__)

SERVER_ID_FILE = "server-id"
STOP_MESSAGE = "The server stopped while this task was running; its turn was ended."
RESTART_MESSAGE = "The server restarted while this task was running; its turn was lost."
GONE_MESSAGE = (
    "The box running this task ({url}) stopped answering while its turn ran; the turn "
    "was lost with it. Send your message again to go on."
)


@dataclass
class Storage:
    database: Database
    # a2a-sdk's own stores, opened when a request needs one (ListTasks, push configs).
    sdk: SdkStores
    tasks: CoalescingTaskStore
    session_map: SessionMap
    owners: ConversationOwners
    audit: AuditLog
    signals: TaskSignals
    # Tasks the last run left working, closed as failed now.
    closed: list[Task]
    # Tasks the last run left waiting for an answer, with their owners.
    waiting: list[tuple[Task, str]]
    # Whether a task outlives a restart: a start keeps these and a stop leaves them.
    keep: Callable[[Task], bool]
    _table: TaskTable
    # The peer tasks this node's tasks handed work to (delegation/outbound.py).
    delegations: DelegationLinks
    # Each task's numbered events, for a stream taken up again (store/events.py).
    events: TaskEvents
    # Each person's limits on what the store keeps, and ended tasks' expiry.
    keeping: TaskKeeping

    async def contexts(self) -> set[str]:
        """Every context the store has a task in or an owner for (a worktree of any other
        is a leftover): a conversation whose tasks expired or gave way to its person's
        newer ones still exists, and its worktree still holds its work."""
        return await self._table.context_ids() | await self.owners.context_ids()

    async def close_unfinished(self, message: str) -> list[str]:
        """At stop: ends as failed, saying `message`, every task this process holds
        unfinished but those the next start takes back (`keep`), so that start finds
        none of them to close; returns the ids of those ended."""
        return await self.tasks.close_held(message, keep=self.keep)

    async def fail_working_of(self, server: str, url: str) -> list[str]:
        """The turns a box was running when it died (cluster/placement.py notices): each
        is failed, saying so; its questions waiting for a person stay, for the box to
        take back if it starts again. Returns the ids failed."""
        failed = []
        for task, owner in await self._table.unfinished(SERVER_ID_KEY, server):
            runner = task.metadata.fields.get(SERVER_ID_KEY)
            if runner is None or runner.string_value != server:
                continue  # a task of no server's, from before servers were named
            if task.status.state not in BUSY_STATES:
                continue
            mark_failed(task, GONE_MESSAGE.format(url=url), "box_gone")
            await self._table.save(task, owner)
            failed.append(task.id)
        return failed

    async def flush(self) -> None:
        """Writes what is still held in memory: the last task states, the session map."""
        await self.keeping.aclose()
        await self.tasks.flush(final=True)
        await self.session_map.flush()
        await self.events.aclose()

    async def aclose(self) -> None:
        await self.sdk.aclose()
        await self.database.aclose()


def server_id(state_dir: Path) -> str:
    """This server's stable name in a shared store, kept in its state dir: the tasks it
    runs carry it, so its restart closes its own unfinished tasks and nobody else's."""
    path = state_dir / SERVER_ID_FILE
    if not path.exists():
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_private(path, uuid.uuid4().hex + "\n")
    return path.read_text().strip()


async def close_unfinished_tasks(
    table: TaskTable, server: str, keep: Callable[[Task], bool] = lambda _: False
) -> tuple[list[Task], list[tuple[Task, str]]]:
    """Marks every task this server's previous run left unfinished as failed (and those
    no server claims, from before servers were named), but those `keep` says can be taken
    back (a task waiting for an answer); returns the failed ones and the kept ones, with
    their owners: their agent turn died with that process, and a task must never read
    as `working` forever.
    Another server's tasks in a shared store are its own to close."""
    unfinished = await table.unfinished(SERVER_ID_KEY, server)
    kept = [(task, owner) for task, owner in unfinished if keep(task)]
    stale = [(task, owner) for task, owner in unfinished if not keep(task)]
    for task, owner in stale:
        mark_failed(task, RESTART_MESSAGE, "server_restarted")
        await table.save(task, owner)
    if stale:
        log.info("closed %d task(s) left unfinished by the previous run", len(stale))
    if kept:
        log.info("%d task(s) still wait for an answer, as before the restart", len(kept))
    return [task for task, _ in stale], kept


async def open_storage(
    settings: Settings,
    database: Database,
    sdk: SdkStores,
    keep: Callable[[Task], bool],
    on_change: Callable[[Task], None],
    on_save: Callable[[Task, str], None],
) -> Storage:
    """Opens everything kept in the store. `keep` says which unfinished task outlives a
    restart (one waiting for an answer the next start can ask again), `on_change` hears
    of every task state change (push notifications), `on_save` of every save with its
    owner (the desk)."""
    shared = settings.store is not None
    server = (server_id(settings.state_dir), settings.own_url)
    table = TaskTable(database, sdk)
    await table.create()
    if shared:
        await table.index_contexts()
    closed, waiting = await close_unfinished_tasks(table, server[0], keep=keep)
    limits = Limits(
        settings.tasks_kept_per_caller,
        settings.events_kept_per_caller,
        settings.ended_tasks_kept_hours,
    )
    keeping = TaskKeeping(database, limits)
    tasks = CoalescingTaskStore(
        table, sdk, server, on_change=on_change, shared=shared, on_save=on_save, keeping=keeping
    )
    signals = TaskSignals(database)
    await signals.initialize()
    session_map = SessionMap(database)
    await session_map.initialize()
    owners = ConversationOwners(database)
    await owners.initialize()
    audit = AuditLog(database)
    await audit.initialize()
    delegations = DelegationLinks(database)
    await delegations.initialize()
    events = TaskEvents(database, settings.events_kept, settings.events_kept_hours)
    await events.initialize()
    keeping.start()  # after the events' table: a sweep removes a task's events too
    return Storage(
        database, sdk, tasks, session_map, owners, audit, signals, closed, waiting, keep, table,
        delegations, events, keeping,
    )  # fmt: skip
