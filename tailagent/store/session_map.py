"""A2A context id -> agent session id, kept in the store so a conversation outlives
its agent process and the server's restart.

The tasks themselves are tasks.py's; this map sits beside them in the same database.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from tailagent.store.database import Database
from tailagent.store.tasks import WRITE_DELAY, MintedIds

log = logging.getLogger(__name__)

MAX_CACHED_SESSIONS = 10_000

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
