"""Writes to the default SQLite store without the ORM or a thread hop.

a2a-sdk's DatabaseTaskStore saves through SQLAlchemy's async ORM: a `merge` (a
SELECT, then an INSERT or UPDATE) and a commit, each statement a round trip to
aiosqlite's worker thread and back. Its engine cannot be told to do otherwise:
the store needs an AsyncEngine, and every aiosqlite call is such a hop. For a
local SQLite file in WAL mode with `synchronous=NORMAL`, a commit is one append
to the WAL (no fsync), tens of microseconds: cheaper to do on the event loop
than to hand to a thread. So the durable writes of a turn go through this one
upsert on a plain sqlite3 connection (and so do the session map's), and
everything else (reads, lists, other tables) stays on SQLAlchemy's engine.

It writes the very row the SDK's store writes: the same columns, converted by
the same SQLAlchemy type processors. It never blocks the loop on the database's
write lock (which another connection of this process may hold across an await):
it tries again a few times a millisecond apart, then reports a busy database, and
its caller writes through SQLAlchemy's engine instead.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from a2a.server.models import TaskModel
from a2a.types.a2a_pb2 import Task
from google.protobuf.json_format import MessageToDict
from sqlalchemy import Table
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine

# The SDK's store marks each row with the protocol version of its format.
PROTOCOL_VERSION = "1.0"
# A busy database is tried this many times, this far apart, before the caller is told.
TRIES = 5
RETRY_DELAY = 0.001
# This connection only writes: past the B-tree's upper pages, SQLite's default 2 MiB
# page cache held the pages of rows written once and never read here again (2.3 MiB
# of the server's memory after 1,400 tasks, for no measurable gain in write time).
CACHE_KIB = 256


class SqliteWriter:
    def __init__(self, path: str, table: Table, dialect: Dialect) -> None:
        # isolation_level=None: each upsert commits on its own, with no open
        # transaction left behind to hold the write lock between saves.
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=0")
        self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        columns = [column.name for column in table.columns]
        self._convert: list[Callable[[Any], Any] | None] = [
            column.type.dialect_impl(dialect).bind_processor(dialect) for column in table.columns
        ]
        self._keys = columns
        quoted = [f'"{name}"' for name in columns]
        updates = ", ".join(f"{name} = excluded.{name}" for name in quoted if name != '"id"')
        self._upsert = (
            f'INSERT INTO "{table.name}" ({", ".join(quoted)}) '
            f"VALUES ({', '.join('?' for _ in columns)}) "
            f"ON CONFLICT (id) DO UPDATE SET {updates}"
        )

    async def save(self, task: Task, owner: str) -> bool:
        """Stores the task; False (nothing written) while another connection keeps
        the write lock."""
        row = self._row(task, owner)
        values = [
            value if convert is None else convert(value)
            for value, convert in zip((row[key] for key in self._keys), self._convert, strict=True)
        ]
        return await self.write(self._upsert, [values])

    async def write(self, sql: str, rows: Sequence[Sequence[Any] | Mapping[str, Any]]) -> bool:
        """Runs one statement for each row, in one transaction; False (nothing
        written) while another connection keeps the write lock. That connection (the
        session map's fallback, the audit log) holds it for a hop or two of its own
        transaction: a few short waits usually outlast it."""
        for _ in range(TRIES):
            if self._try(sql, rows):
                return True
            await asyncio.sleep(RETRY_DELAY)
        return False

    def _try(self, sql: str, rows: Sequence[Sequence[Any] | Mapping[str, Any]]) -> bool:
        try:
            if len(rows) == 1:
                self._db.execute(sql, rows[0])
                return True
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                return False
            raise
        try:
            self._db.executemany(sql, rows)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")
        return True

    @staticmethod
    def _row(task: Task, owner: str) -> dict[str, Any]:
        status = task.status
        return {
            "id": task.id,
            "context_id": task.context_id,
            "kind": "task",
            "owner": owner,
            "last_updated": status.timestamp.ToDatetime() if status.HasField("timestamp") else None,
            "status": MessageToDict(status),
            "artifacts": [MessageToDict(artifact) for artifact in task.artifacts],
            "history": [MessageToDict(message) for message in task.history],
            "metadata": MessageToDict(task.metadata) if task.metadata.fields else None,
            "protocol_version": PROTOCOL_VERSION,
        }

    def close(self) -> None:
        self._db.close()


def direct_writer(engine: AsyncEngine, model: type[TaskModel]) -> SqliteWriter | None:
    """The writer for a store in a SQLite file; None for any other database (a
    PostgreSQL shared by several servers stays entirely on a2a-sdk's store)."""
    url = engine.url
    if not url.drivername.startswith("sqlite") or url.database in (None, "", ":memory:"):
        return None
    return SqliteWriter(url.database, cast(Table, model.__table__), engine.dialect)
