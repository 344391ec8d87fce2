"""SQLAlchemy, for what needs it: a PostgreSQL store, and a2a-sdk's own stores.

Importing this module imports SQLAlchemy (~18 MiB); a server on the default SQLite
store does so only for a request that needs a2a-sdk's stores (see sdk_stores.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from tailagent.store.database import Database, Params, sqlite_path


def open_engine(url: str) -> AsyncEngine:
    """An engine on the store: SQLite tuned for one local service, or a shared PostgreSQL."""
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


class EngineDatabase(Database):
    postgres = True
    errors = (SQLAlchemyError, OSError)

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = open_engine(url)

    async def execute(self, sql: str, rows: Sequence[Params] | Params = ()) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(text(sql), rows if rows else None)  # type: ignore[arg-type]

    async def fetch(self, sql: str, params: Params | None = None) -> list[tuple[Any, ...]]:
        async with self.engine.connect() as conn:
            result = await conn.execute(text(sql), dict(params or {}))
            return [tuple(row) for row in result]

    def json_text(self, column: str, key: str) -> str:
        return f"({column} ->> '{key}')"

    async def aclose(self) -> None:
        await self.engine.dispose()
