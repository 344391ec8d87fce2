"""Where the store's statements run, said once for SQLite and PostgreSQL, and the
database a store URL names (`open_database`).

The default store is one SQLite file that only this server writes. Its statements run
on one plain sqlite3 connection, on the event loop: in WAL mode with
`synchronous=NORMAL` a commit is an append to the WAL and a read of a task a few pages
from the OS's cache, tens of microseconds, less than the hop to a worker thread an
async driver costs. SQLAlchemy is never imported for it (it is ~18 MiB of a server's
memory). A PostgreSQL store that several servers share goes through SQLAlchemy's async
engine, imported only when one is opened (`open_engine`: for such a store, or for
a2a-sdk's own stores, see sdk_stores.py).

Statements are text with `:named` parameters, which both take; the few places where
the two dialects differ ask the database (`json_text`, `postgres`). A table that few
servers ever need is made on its first use, the one way `LazyTable` says.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tailagent.statedir.files import create_private

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

# A busy database (another process, or the SDK's own engine when a rare request loaded
# it, holds the write lock) is tried again this many times, the wait doubling from this.
TRIES = 12
FIRST_RETRY_DELAY = 0.001
# SQLite copies its write-ahead log into the database itself (a checkpoint, with an
# fsync) every 1,000 pages, inside the commit that crosses them: on the event loop, a
# ~10 ms stall of every request every ~150 turns. Here a thread of its own does it
# instead, this often, when something was written; the loop's commits only append.
CHECKPOINT_INTERVAL = 1.0
# Under writes that never pause, a passive checkpoint never catches the log's end (new
# frames land while it copies), so the log never starts over and grows without bound:
# ~10 MiB a minute from one caller's turns back to back, while the file itself stayed
# at 13.6 MiB (bench/bench_store_growth.py). Past this size the checkpointer copies it
# all and truncates it (TRUNCATE), holding writers off for that copy (tens of ms for
# 16 MiB; the loop's statements retry a busy database for ~4 s), and a log that starts
# over is cut back to this size.
WAL_LIMIT_BYTES = 16 * 2**20
CHECKPOINT_BUSY_MS = 2000
# Past the B-tree's upper pages, SQLite's default 2 MiB page cache held pages of rows
# written once and seldom read again (2.3 MiB of the server's memory after 1,400 tasks,
# for no measurable gain): the OS's page cache keeps the file's hot pages anyway.
CACHE_KIB = 256

Params = Mapping[str, Any]
log = logging.getLogger(__name__)


class StoreUnavailable(Exception):
    """The store cannot be opened; str() is the one line that says why."""


class StoreBusy(Exception):
    """Another connection kept the SQLite file's write lock through every try."""


class Database(ABC):
    """Where the store's statements run. `url` is the store's URL, as configured."""

    url: str
    postgres: bool
    # What its statements raise when the database fails them (not a caller's mistake).
    errors: tuple[type[Exception], ...]

    @abstractmethod
    async def execute(self, sql: str, rows: Sequence[Params] | Params = ()) -> None:
        """Runs the statement once, or once per row of a sequence, in one transaction."""

    @abstractmethod
    async def fetch(self, sql: str, params: Params | None = None) -> list[tuple[Any, ...]]:
        """The statement's rows."""

    @abstractmethod
    async def change(self, sql: str, params: Params | None = None) -> list[tuple[Any, ...]]:
        """A statement that writes and returns rows (`... RETURNING`), committed."""

    @abstractmethod
    def json_text(self, column: str, key: str) -> str:
        """SQL for the text at `key` of a JSON column (None where it is missing)."""

    async def check(self) -> None:
        """Raises StoreUnavailable with one line if the store cannot be reached, so a
        wrong URL or a database that is down stops the start rather than a request."""
        try:
            await self.fetch("SELECT 1")
        except self.errors as exc:
            raise StoreUnavailable(f"cannot open the store {redacted(self.url)}: {exc}") from None

    @abstractmethod
    async def aclose(self) -> None: ...


class LazyTable:
    """A table a store seldom needs, made on its first use rather than at every start:
    `ready()` runs `statements` (its CREATE ... IF NOT EXISTS, its indexes) once, the
    first caller making it while any other waits, and then gives the database."""

    def __init__(self, database: Database, *statements: str) -> None:
        self._db = database
        self._statements = statements
        self._made = False
        self._making = asyncio.Lock()

    async def ready(self) -> Database:
        async with self._making:
            if not self._made:
                for statement in self._statements:
                    await self._db.execute(statement)
                self._made = True
            return self._db


class SqliteDatabase(Database):
    postgres = False
    errors = (sqlite3.Error, StoreBusy, OSError)

    def __init__(self, url: str, path: Path) -> None:
        self.url = url
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        create_private(path)  # before SQLite makes it, and its WAL files, 0644
        # isolation_level=None: a statement commits on its own unless a transaction was
        # begun, so no transaction is ever left open to hold the write lock.
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        # Durable across a crash of the process, which is the failure that matters for
        # a local service; a power loss may lose the last commits.
        self._db.execute("PRAGMA synchronous=NORMAL")
        # Never wait for the lock inside SQLite: that would stop the event loop, which
        # the holder (the SDK's engine, on its own thread) may need to let it go.
        self._db.execute("PRAGMA busy_timeout=0")
        self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        self._db.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer's (see above)
        self._db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
        self._written = False
        self._checkpointer: asyncio.Task[None] | None = None
        self._checkpointing: asyncio.Future[None] | None = None
        self._checkpoint_db: sqlite3.Connection | None = None

    async def execute(self, sql: str, rows: Sequence[Params] | Params = ()) -> None:
        await self._retry(self._execute, sql, rows)
        self._written = True
        if self._checkpointer is None:
            self._checkpointer = asyncio.create_task(self._checkpoints(), name="wal-checkpoints")

    async def _checkpoints(self) -> None:
        while True:
            await asyncio.sleep(CHECKPOINT_INTERVAL)
            if self._written:
                self._written = False
                self._checkpointing = asyncio.ensure_future(asyncio.to_thread(self._checkpoint))
                try:  # a cancel (the close) leaves it to finish: aclose waits for it
                    await asyncio.shield(self._checkpointing)
                except Exception:  # the next one tries again
                    log.warning("checkpointing %s", self.path, exc_info=True)

    def _checkpoint(self) -> None:
        """Copies what the log holds into the database, as far as no reader needs it
        (PASSIVE: it never waits for, or holds up, the loop's statements); a log past
        WAL_LIMIT_BYTES is copied whole and truncated (see there)."""
        if self._checkpoint_db is None:
            self._checkpoint_db = sqlite3.connect(self.path, check_same_thread=False)
            self._checkpoint_db.execute(f"PRAGMA busy_timeout={CHECKPOINT_BUSY_MS}")
        wal = Path(f"{self.path}-wal")
        large = wal.exists() and wal.stat().st_size > WAL_LIMIT_BYTES
        mode = "TRUNCATE" if large else "PASSIVE"
        self._checkpoint_db.execute(f"PRAGMA wal_checkpoint({mode})").fetchall()

    async def fetch(self, sql: str, params: Params | None = None) -> list[tuple[Any, ...]]:
        return await self._retry(lambda: self._db.execute(sql, params or {}).fetchall())

    async def change(self, sql: str, params: Params | None = None) -> list[tuple[Any, ...]]:
        rows = await self.fetch(sql, params)  # a statement commits on its own here
        self._written = True
        return rows

    def json_text(self, column: str, key: str) -> str:
        return f"json_extract({column}, '$.{key}')"

    async def aclose(self) -> None:
        if self._checkpointer is not None:
            self._checkpointer.cancel()
            await asyncio.gather(self._checkpointer, return_exceptions=True)
        if self._checkpointing is not None:
            await asyncio.gather(self._checkpointing, return_exceptions=True)
        if self._checkpoint_db is not None:
            self._checkpoint_db.close()
        self._db.close()  # the last connection out checkpoints the rest

    def _execute(self, sql: str, rows: Sequence[Params] | Params) -> None:
        if isinstance(rows, Mapping) or len(rows) <= 1:
            single = rows if isinstance(rows, Mapping) else (rows[0] if rows else {})
            self._db.execute(sql, single)
            return
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany(sql, rows)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    async def _retry(self, step: Any, *args: Any) -> Any:
        delay = FIRST_RETRY_DELAY
        for _ in range(TRIES):
            try:
                return step(*args)
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                    raise
            await asyncio.sleep(delay)
            delay *= 2
        raise StoreBusy(f"{self.path} stayed locked by another connection")


class EngineDatabase(Database):
    """A store through SQLAlchemy's async engine: a PostgreSQL that servers share."""

    postgres = True

    def __init__(self, url: str) -> None:
        from sqlalchemy import text  # SQLAlchemy, only now
        from sqlalchemy.exc import SQLAlchemyError

        self.url = url
        self.errors = (SQLAlchemyError, OSError)
        self._text = text
        self.engine = open_engine(url)

    async def execute(self, sql: str, rows: Sequence[Params] | Params = ()) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(self._text(sql), rows if rows else None)  # type: ignore[arg-type]

    async def fetch(self, sql: str, params: Params | None = None) -> list[tuple[Any, ...]]:
        async with self.engine.connect() as conn:
            result = await conn.execute(self._text(sql), dict(params or {}))
            return [tuple(row) for row in result]

    async def change(self, sql: str, params: Params | None = None) -> list[tuple[Any, ...]]:
        # One statement is its own transaction: autocommit spares the BEGIN and COMMIT
        # round trips (a carried request's nonce claim, bench/bench_cluster.py).
        async with self.engine.connect() as conn:
            conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
            result = await conn.execute(self._text(sql), dict(params or {}))
            return [tuple(row) for row in result]

    def json_text(self, column: str, key: str) -> str:
        return f"({column} ->> '{key}')"

    async def aclose(self) -> None:
        await self.engine.dispose()


def open_database(url: str) -> Database:
    """The store at `url`: SQLite tuned for one local service, or a shared PostgreSQL."""
    path = sqlite_path(url)
    if path is not None:
        return SqliteDatabase(url, path)
    return EngineDatabase(url)


def open_engine(url: str) -> AsyncEngine:
    """An engine on the store: SQLite tuned for one local service, or a shared PostgreSQL.
    Imports SQLAlchemy (~18 MiB): a server on the default SQLite store opens one only
    for a request that needs a2a-sdk's stores."""
    from sqlalchemy import event
    from sqlalchemy.ext.asyncio import create_async_engine

    if sqlite_path(url) is None:
        # pre_ping: a database restart costs one retried connection, not a failed request.
        return create_async_engine(url, pool_pre_ping=True)
    engine = create_async_engine(url)

    @event.listens_for(engine.sync_engine, "connect")
    def _tune(dbapi_connection, _record):  # type: ignore[no-untyped-def]
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=5000")
        cursor.close()

    return engine


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite store URL (`sqlite+aiosqlite:////abs/path.db`); None for any
    other database."""
    scheme, _, rest = url.partition("://")
    if not scheme.startswith("sqlite"):
        return None
    file = rest.removeprefix("/").partition("?")[0]
    if file in ("", ":memory:"):
        # Every connection would see a database of its own, all gone at the restart.
        raise StoreUnavailable(f"the store {url} names no file: SQLite needs one")
    return Path(file)


def redacted(url: str) -> str:
    """A store URL fit for logs and errors: the password hidden."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()
