"""What one person may keep in the store, and how long an ended task stays.

Without bounds a caller fills the disk: 200 tasks of 206 events each took 7.5 s and
kept 41,200 rows (+23 MiB of pages, +110 MiB with SQLite's WAL), and a task row was
never removed. So each person (the task's owner: a tailnet login, a tag set, a token's
name) keeps at most `tasks_kept_per_caller` tasks and `events_kept_per_caller` events,
and an ended task goes once it is `ended_tasks_kept_hours` old.

The defaults, and why:
- 1,000 tasks a person: a busy person starts tens of tasks a day, so this is weeks
  of history on the desk and in ListTasks; a row is a few KiB (its history and
  artifacts), a few MiB a person.
- 100,000 events a person: an event row is ~570 bytes (23 MiB for 41,200), so ~55 MiB
  a person at most; it holds ten tasks streaming at the per-task cap (events_kept,
  10,000), and events matter only for a stream taken up again, within hours.
- 720 hours (30 days) for an ended task: long enough to come back to a month's work
  and read what was done; the audit log and the ledger keep what must outlive it.

Room is made when a person starts a new task, oldest first and only among ended tasks
(completed, failed, canceled, rejected): a task that runs or waits for an answer is
never removed. Past the task limit the oldest ended tasks go, events and all (and
what else served only them: see WITH_TASK and LINKS_OF_GONE_TASKS); past the
event limit the oldest ended tasks lose their events first (their snapshot stays: a
stream taken up again gets it, marked as such). A new task that would pass a limit its
person's unfinished tasks alone reach is refused, naming the limit. Admins are held to
the same limits: the store is the box's disk either way.

A person's new tasks are admitted one at a time on a server (`admitting`): from the
check until the task is held in memory and its first row written, their next one
waits, then counts it. So starts sent all at once admit no more than the limit leaves
room for (without it each saw the same room: six at once all passed a limit of three
on PostgreSQL). Servers that share a PostgreSQL store do not wait for each other: each
has at most one of a person's new tasks between its check and its row (a shared store
writes a new task's row at once), so a check elsewhere misses at most that one, and a
person passes a limit by at most one task per other server starting theirs at the same
moment, until their unfinished tasks end. A lock across servers (an advisory lock held
over the SDK's save of the row) would hold a second pooled connection of the same
engine per person starting a task: a burst of people could wait on each other's pool.

How big the store is shows on /metrics and in `tailagent doctor` (`measure`): SQLite's
file and write-ahead log, read from the file system (the log can be several times the
file between checkpoints: the attack above grew the two by 110 MiB), or a shared
PostgreSQL database's own figure, and the rows of the two tables that grow with use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from a2a.types.a2a_pb2 import TaskState
from a2a.utils.errors import UnsupportedOperationError

from tailagent.output.metrics import STORE_BYTES, STORE_ROWS
from tailagent.store.database import Database, SqliteDatabase
from tailagent.store.finality import ENDED_STATES
from tailagent.store.table import TABLE, sqlite_datetime

log = logging.getLogger(__name__)

# How often ended tasks past their age are looked for: hourly, or four times per age
# when the age is shorter (a test's seconds).
SWEEP_INTERVAL = 3600.0
MIN_SWEEP_INTERVAL = 0.25
_ENDED = [TaskState.Name(state) for state in ENDED_STATES]
EVENTS_TABLE = "task_events"
# Tables whose rows, by their `task_id`, serve only a live task, and go with it: its
# numbered events, the signals between servers about it, the push configs a2a-sdk keeps
# for it. The audit log and the cost ledger (delegated_costs, turn_running) name tasks
# too, and outlive them on purpose: what was allowed and what it cost stay answerable.
WITH_TASK = (EVENTS_TABLE, "task_signals", "push_notification_configs")
# A delegation link (store/delegations.py) serves its task (a cancel or an answer
# relayed to the peer's task) and its conversation (a follow-up delegation continues the
# peer's conversation the newest link names). So once its task is gone, a link goes
# when a newer one of the same conversation and peer supersedes it: one stays per
# conversation and peer, as the conversation itself does (its worktree, its session).
LINKS_TABLE = "delegation_links"
LINKS_OF_GONE_TASKS = (
    f"DELETE FROM {LINKS_TABLE} WHERE context_id = :c"
    f" AND task_id NOT IN (SELECT id FROM {TABLE}) AND EXISTS (SELECT 1 FROM {LINKS_TABLE} n"
    f" WHERE n.context_id = {LINKS_TABLE}.context_id AND n.peer_url = {LINKS_TABLE}.peer_url"
    f" AND n.created_at > {LINKS_TABLE}.created_at)"
)


@dataclass(frozen=True)
class Limits:
    """Per person: tasks and events kept; for all: the hours an ended task stays."""

    tasks: int = 1_000
    events: int = 100_000
    ended_hours: float = 720.0


class StoreFull(UnsupportedOperationError):
    """A new task would pass a person's limit that removing ended tasks cannot meet."""


class TaskKeeping:
    def __init__(self, database: Database, limits: Limits) -> None:
        self._db = database
        self.limits = limits
        self._state = database.json_text("status", "state")
        self._ended = ", ".join(f":e{i}" for i in range(len(_ENDED)))
        self._states = {f"e{i}": name for i, name in enumerate(_ENDED)}
        self._sweeper: asyncio.Task[None] | None = None
        self._present: set[str] = set()  # the tables the store had, when last asked
        # owner -> (their lock, how many of their new tasks hold it or wait for it)
        self._admitting: dict[str, tuple[asyncio.Lock, list[int]]] = {}

    @contextlib.asynccontextmanager
    async def admitting(
        self, owner: str, held: Callable[[], Mapping[str, str]]
    ) -> AsyncIterator[None]:
        """Makes room for `owner`'s new task (make_room, with `held()` then), and is held
        until the store holds that task and has written it: their next new task on this
        server waits, and then counts it."""
        lock, users = self._admitting.setdefault(owner, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                await self.make_room(owner, held())
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._admitting[owner]

    async def make_room(self, owner: str, held: Mapping[str, str]) -> None:
        """Before `owner`'s new task is first written: removes the oldest ended tasks
        (or their events) past the person's limits, or raises StoreFull. `held`: the
        unfinished tasks this process holds, with their owners (some not written yet)."""
        rows = await self._db.fetch(
            f"SELECT t.id, {self._state} IN ({self._ended}),"
            " (SELECT COUNT(*) FROM task_events e WHERE e.task_id = t.id), t.context_id"
            f" FROM {TABLE} t WHERE t.owner = :o ORDER BY t.last_updated, t.id",
            {**self._states, "o": owner},
        )
        ids = {row[0] for row in rows}
        unwritten = [i for i, o in held.items() if o == owner and i not in ids]
        tasks = len(rows) + len(unwritten) + 1  # and the new one
        ended = [(str(row[0]), int(row[2]), str(row[3])) for row in rows if row[1]]
        gone = ended[: max(0, tasks - self.limits.tasks)]
        if tasks - len(gone) > self.limits.tasks:
            says = f"{owner} has {tasks - 1 - len(ended)} tasks still running or waiting"
            raise StoreFull(message=self._full(says, "tasks", self.limits.tasks))
        events = sum(int(row[2]) for row in rows) - sum(n for _, n, _ in gone)
        emptied: list[str] = []
        for task_id, count, _ in ended[len(gone) :]:
            if events < self.limits.events:
                break
            if count:
                emptied.append(task_id)
                events -= count
        if events >= self.limits.events:
            says = f"{owner}'s tasks still running or waiting keep {events} events"
            raise StoreFull(message=self._full(says, "events", self.limits.events))
        if emptied:
            await self._db.execute(f"DELETE FROM {EVENTS_TABLE} WHERE task_id = :t",
                                   [{"t": task_id} for task_id in emptied])  # fmt: skip
        await self._remove([(task_id, context) for task_id, _, context in gone])

    def _full(self, held: str, what: str, limit: int) -> str:
        return (
            f"{held}, as many as one person may keep in the store ({what}_kept_per_caller"
            f" = {limit}): cancel one, or answer one so it can finish, then start this one"
        )

    async def _remove(self, tasks: list[tuple[str, str]]) -> None:
        """Removes the tasks, (id, context id) each, and what only served them: their
        rows in WITH_TASK's tables, and their delegation links but the newest of their
        conversation's with each peer (see LINKS_OF_GONE_TASKS)."""
        if not tasks:
            return
        removed = [{"t": task_id} for task_id, _ in tasks]
        for table in await self._tables(WITH_TASK):
            await self._db.execute(f"DELETE FROM {table} WHERE task_id = :t", removed)
        await self._db.execute(f"DELETE FROM {TABLE} WHERE id = :t", removed)
        if await self._tables((LINKS_TABLE,)):
            contexts = sorted({context for _, context in tasks})
            await self._db.execute(LINKS_OF_GONE_TASKS, [{"c": c} for c in contexts])

    async def _tables(self, names: tuple[str, ...]) -> list[str]:
        """Those of `names` the store has (a2a-sdk makes its push configs' table only
        when a request first needs it)."""
        if not set(names) <= self._present:
            rows = await self._db.fetch(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                if self._db.postgres
                else "SELECT name FROM sqlite_master WHERE type = 'table'"
            )
            self._present = {str(row[0]) for row in rows}
        return [name for name in names if name in self._present]

    async def expire(self) -> int:
        """Removes every ended task last updated more than the configured hours ago,
        with its events (see _remove); returns how many went."""
        moment = datetime.now(UTC) - timedelta(hours=self.limits.ended_hours)
        naive = moment.replace(tzinfo=None)
        before: Any = naive if self._db.postgres else sqlite_datetime(naive)
        old = f"{self._state} IN ({self._ended}) AND last_updated < :before"
        params = {**self._states, "before": before}
        rows = await self._db.fetch(f"SELECT id, context_id FROM {TABLE} WHERE {old}", params)
        if rows:
            await self._remove([(str(row[0]), str(row[1])) for row in rows])
            hours = self.limits.ended_hours
            log.info("removed %d ended task(s) older than %g hours", len(rows), hours)
        return len(rows)

    def start(self) -> None:
        """Sweeps for expired tasks now and then in the background, until aclose."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(), name="store-expiry")

    async def _sweep(self) -> None:
        interval = max(MIN_SWEEP_INTERVAL, min(SWEEP_INTERVAL, self.limits.ended_hours * 900))
        while True:
            try:
                await self.expire()
            except self._db.errors:  # down for now: the next sweep tries again
                log.warning("ended tasks could not be expired", exc_info=True)
            await asyncio.sleep(interval)

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper


@dataclass(frozen=True)
class StoreSize:
    bytes: int
    tasks: int
    events: int

    def describe(self) -> str:
        return f"{self.bytes / 2**20:.1f} MiB, {self.tasks} tasks, {self.events} task events"


async def measure(database: Database) -> StoreSize:
    """The store's bytes on disk and its task and event rows (0 for a table not made yet)."""
    if isinstance(database, SqliteDatabase):
        size = sum(_bytes(Path(f"{database.path}{suffix}")) for suffix in ("", "-wal"))
    else:
        rows = await database.fetch("SELECT pg_database_size(current_database())")
        size = int(rows[0][0])
    return StoreSize(size, await _rows(database, TABLE), await _rows(database, EVENTS_TABLE))


async def _rows(database: Database, table: str) -> int:
    try:
        rows = await database.fetch(f"SELECT COUNT(*) FROM {table}")
    except database.errors:  # a store no server has opened yet
        return 0
    return int(rows[0][0])


def _bytes(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


async def show(database: Database) -> None:
    """Sets /metrics' store gauges to the store's size now (at each scrape: a COUNT of
    two tables the per-person limits keep bounded, and two stat calls)."""
    size = await measure(database)
    STORE_BYTES.set(size.bytes)
    STORE_ROWS.labels(TABLE).set(size.tasks)
    STORE_ROWS.labels(EVENTS_TABLE).set(size.events)
