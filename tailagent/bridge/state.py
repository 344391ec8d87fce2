"""Everything tailagent keeps across restarts, in one SQLite file in the state dir.

Tasks live in a2a-sdk's own DatabaseTaskStore; beside them, the context -> agent
session map. On start, tasks a previous run left working or parked are closed as
failed: their agent turn died with that process, and a task must never read as
`working` forever.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from datetime import UTC, datetime
from pathlib import Path

from a2a.server.context import ServerCallContext
from a2a.server.id_generator import IDGenerator, IDGeneratorContext
from a2a.server.models import TaskModel
from a2a.server.tasks import DatabaseTaskStore
from a2a.types.a2a_pb2 import Message, Part, Role, Task, TaskState
from sqlalchemy import event, select, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from tailagent.access.identity import OwnerUser

log = logging.getLogger(__name__)

UNFINISHED_STATES = (
    TaskState.TASK_STATE_SUBMITTED,
    TaskState.TASK_STATE_WORKING,
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
)
MAX_MINTED = 10_000
MAX_CACHED_SESSIONS = 10_000
WRITE_DELAY = 0.05
STOP_MESSAGE = "The server stopped while this task was running; its turn was ended."
RESTART_MESSAGE = "The server restarted while this task was running; its turn was lost."


def open_engine(state_dir: Path) -> AsyncEngine:
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    engine = create_async_engine(f"sqlite+aiosqlite:///{state_dir / 'tailagent.db'}")

    @event.listens_for(engine.sync_engine, "connect")
    def _tune(dbapi_connection, _record):  # type: ignore[no-untyped-def]
        # WAL keeps readers off the writer's back; NORMAL stays durable across a
        # process crash, which is the failure that matters for a local service.
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=5000")
        cursor.close()

    return engine


class MintedIds(IDGenerator):
    """Ids this process generated for new tasks or contexts, with nothing stored under
    them yet: a store can answer "not found" for them without asking the database.

    Handed to a2a-sdk as its id generator. Ids whose request failed before anything
    was stored are forgotten oldest first, past a bound.
    """

    def __init__(self) -> None:
        self._ids: dict[str, None] = {}

    def generate(self, context: IDGeneratorContext | None = None) -> str:
        new_id = str(uuid.uuid4())
        self._ids[new_id] = None
        if len(self._ids) > MAX_MINTED:
            for stale in list(self._ids)[: MAX_MINTED // 2]:
                del self._ids[stale]
        return new_id

    def __contains__(self, some_id: object) -> bool:
        return some_id in self._ids

    def discard(self, some_id: str) -> None:
        self._ids.pop(some_id, None)


class SessionMap:
    """A2A context id -> agent session id, so a context outlives its agent process.

    Reads are served from memory once seen; a context this process minted has no
    row yet, so it costs no read at all. Writes go to SQLite in the background, in
    order: the map only matters to the next run, and `flush()` runs at stop.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._known: dict[str, tuple[str, str]] = {}
        self.minted = MintedIds()
        self._pending: dict[str, tuple[str, str]] = {}
        self._writer: asyncio.Task[None] | None = None

    async def initialize(self) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                text(
                    "CREATE TABLE IF NOT EXISTS agent_sessions ("
                    " context_id TEXT PRIMARY KEY, backend TEXT NOT NULL,"
                    " session_id TEXT NOT NULL, updated_at TEXT NOT NULL)"
                )
            )

    async def get(self, context_id: str, backend: str) -> str | None:
        known = self._known.get(context_id)
        if known is None and context_id not in self.minted:
            async with self._engine.connect() as conn:
                row = (
                    await conn.execute(
                        text(
                            "SELECT backend, session_id FROM agent_sessions WHERE context_id = :c"
                        ),
                        {"c": context_id},
                    )
                ).first()
            if row is not None:
                known = (row[0], row[1])
                self._remember(context_id, known)
        if known is None or known[0] != backend:
            return None
        return known[1]

    async def put(self, context_id: str, backend: str, session_id: str) -> None:
        self.minted.discard(context_id)
        self._pending[context_id] = (backend, session_id)
        self._remember(context_id, (backend, session_id))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write(), name="session-map-writer")

    def _remember(self, context_id: str, entry: tuple[str, str]) -> None:
        """Caches an entry; the cache is bounded, the database has them all."""
        self._known.pop(context_id, None)
        self._known[context_id] = entry
        if len(self._known) > MAX_CACHED_SESSIONS:
            for stale in list(self._known)[: MAX_CACHED_SESSIONS // 2]:
                del self._known[stale]

    async def _write(self, delay: float = WRITE_DELAY) -> None:
        await asyncio.sleep(delay)  # one transaction for a burst of new contexts
        while self._pending:
            batch, self._pending = self._pending, {}
            try:
                async with self._engine.begin() as conn:
                    await conn.execute(
                        text(
                            "INSERT INTO agent_sessions"
                            " (context_id, backend, session_id, updated_at)"
                            " VALUES (:c, :b, :s, :t) ON CONFLICT(context_id) DO UPDATE SET"
                            " backend = excluded.backend, session_id = excluded.session_id,"
                            " updated_at = excluded.updated_at"
                        ),
                        [{"c": c, "b": b, "s": sid, "t": _now()} for c, (b, sid) in batch.items()],
                    )
            except Exception:
                log.exception("writing %d agent session(s)", len(batch))

    async def flush(self) -> None:
        if self._writer is not None:
            await self._writer
        await self._write(delay=0)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def mark_failed(task: Task, text: str, kind: str) -> None:
    """Ends a task the server could not finish, with a status that says why."""
    if task.status.HasField("message"):
        task.history.append(task.status.message)  # the last prompt or progress stays readable
    task.status.state = TaskState.TASK_STATE_FAILED
    task.status.timestamp.FromDatetime(datetime.now(UTC))
    task.status.message.CopyFrom(
        Message(
            message_id=f"{kind}-{task.id}",
            role=Role.ROLE_AGENT,
            task_id=task.id,
            context_id=task.context_id,
            parts=[Part(text=text)],
        )
    )
    task.status.message.metadata.update({"kind": kind})


async def close_unfinished_tasks(store: DatabaseTaskStore) -> int:
    """Marks every task a previous run left unfinished as failed; returns how many."""
    await store.initialize()
    names = [TaskState.Name(state) for state in UNFINISHED_STATES]
    async with store.async_session_maker() as session:
        rows = (
            await session.execute(
                select(TaskModel).where(TaskModel.status["state"].as_string().in_(names))
            )
        ).scalars()
        stale = [(row.owner or "", store._from_orm(row)) for row in rows]
    for owner, task in stale:
        mark_failed(task, RESTART_MESSAGE, "server_restarted")
        await store.save(task, ServerCallContext(user=OwnerUser(owner)))
    if stale:
        log.info("closed %d task(s) left unfinished by the previous run", len(stale))
    return len(stale)
