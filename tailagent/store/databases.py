"""Opening the store a URL names: SQLite on its own connection, anything else through
SQLAlchemy (imported only then)."""

from __future__ import annotations

from tailagent.store.database import Database, SqliteDatabase, sqlite_path


def open_database(url: str) -> Database:
    """The store at `url`: SQLite tuned for one local service, or a shared PostgreSQL."""
    path = sqlite_path(url)
    if path is not None:
        return SqliteDatabase(url, path)
    from tailagent.store.engine import EngineDatabase  # SQLAlchemy, only now

    return EngineDatabase(url)
