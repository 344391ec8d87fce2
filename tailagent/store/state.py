"""Everything tailagent keeps across restarts: by default one SQLite file in the
state dir, or a PostgreSQL database that several servers share (`store`).

Tasks live in a2a-sdk's own table (task_table.py); beside them, the context -> agent
session map. On start, tasks a previous run left working are closed as failed: their
agent turn died with that process, and a task must never read as `working` forever.
Tasks it left waiting for an answer are kept waiting, to be taken back (`parked`).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from a2a.server.id_generator import IDGenerator, IDGeneratorContext
from a2a.types.a2a_pb2 import Message, Part, Role, Task, TaskState

from tailagent.statedir.files import write_private
from tailagent.store.database import Database
from tailagent.store.task_table import TaskTable

log = logging.getLogger(__name__)

MAX_MINTED = 10_000
MAX_CACHED_SESSIONS = 10_000
WRITE_DELAY = 0.05
STOP_MESSAGE = "The server stopped while this task was running; its turn was ended."
SERVER_ID_FILE = "server-id"
# Task metadata naming the server that runs the task, in a store several may share.
SERVER_ID_KEY = "tailagentServerId"
SERVER_URL_KEY = "tailagentServerUrl"
# Set in a request's call context when its caller can learn of the task only from
# the response, which comes once the task is final or waiting: a blocking SendMessage
# with no push config, in a store no other server reads.
UNSEEN_UNTIL_SETTLED = "tailagent.unseenUntilSettled"
RESTART_MESSAGE = "The server restarted while this task was running; its turn was lost."


def server_id(state_dir: Path) -> str:
    """This server's stable name in a shared store, kept in its state dir: the tasks it
    runs carry it, so its restart closes its own unfinished tasks and nobody else's."""
    path = state_dir / SERVER_ID_FILE
    if not path.exists():
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_private(path, uuid.uuid4().hex + "\n")
    return path.read_text().strip()


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


_UPSERT_SESSION = (
    "INSERT INTO agent_sessions (context_id, backend, session_id, updated_at)"
    " VALUES (:c, :b, :s, :t) ON CONFLICT(context_id) DO UPDATE SET"
    " backend = excluded.backend, session_id = excluded.session_id,"
    " updated_at = excluded.updated_at"
)


class SessionMap:
    """A2A context id -> agent session id, so a context outlives its agent process.

    Reads are served from memory once seen; a context this process minted has no
    row yet, so it costs no read at all. Writes go to SQLite in the background, in
    order: the map only matters to the next run, and `flush()` runs at stop.
    """

    def __init__(self, database: Database) -> None:
        self._db = database
        self._known: dict[str, tuple[str, str]] = {}
        self.minted = MintedIds()
        self._pending: dict[str, tuple[str, str]] = {}
        self._writer: asyncio.Task[None] | None = None

    async def initialize(self) -> None:
        await self._db.execute(
            "CREATE TABLE IF NOT EXISTS agent_sessions ("
            " context_id TEXT PRIMARY KEY, backend TEXT NOT NULL,"
            " session_id TEXT NOT NULL, updated_at TEXT NOT NULL)"
        )

    async def get(self, context_id: str, backend: str) -> str | None:
        known = self._known.get(context_id)
        if known is None and context_id not in self.minted:
            rows = await self._db.fetch(
                "SELECT backend, session_id FROM agent_sessions WHERE context_id = :c",
                {"c": context_id},
            )
            if rows:
                known = (rows[0][0], rows[0][1])
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
            rows = [{"c": c, "b": b, "s": sid, "t": _now()} for c, (b, sid) in batch.items()]
            try:
                await self._db.execute(_UPSERT_SESSION, rows)
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


async def close_unfinished_tasks(
    table: TaskTable, server: str, keep: Callable[[Task], bool] = lambda _: False
) -> tuple[list[Task], list[tuple[Task, str]]]:
    """Marks every task this server's previous run left unfinished as failed (and those
    no server claims, from before servers were named), but those `keep` says can be taken
    back (a task waiting for an answer); returns the failed ones and the kept ones, with
    their owners.
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
