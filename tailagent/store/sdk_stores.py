"""a2a-sdk's task and push config stores, opened on the first request that needs one.

Importing a2a-sdk's database stores imports SQLAlchemy (~18 MiB), so a server on the
default SQLite store holds them only once a caller asked for what tailagent does not do
itself: a paged, filtered ListTasks, or a push config.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from a2a.auth.user import User

from tailagent.mends.sql_stores import load_sql_module
from tailagent.store.database import Database, EngineDatabase, open_engine

if TYPE_CHECKING:
    from a2a.server.tasks.database_push_notification_config_store import (
        DatabasePushNotificationConfigStore,
    )
    from a2a.server.tasks.database_task_store import DatabaseTaskStore
    from sqlalchemy.ext.asyncio import AsyncEngine


class OwnerUser(User):
    """The a2a-sdk user a request acts as: its stores scope every task by user_name.

    Not a second person: only the owner name, in the shape a2a-sdk's interface asks for
    (its handler and stores read `context.user`)."""

    def __init__(self, owner: str) -> None:
        self._owner = owner

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._owner


PUSH_STORE_MODULE = "a2a.server.tasks.database_push_notification_config_store"


class SdkStores:
    """a2a-sdk's task and push config stores on the same database, made on first use.

    The SDK serves what tailagent does not do itself: the paged, filtered ListTasks,
    and push configs (with their encoding and the SDK's own owner rules). On PostgreSQL
    they share the store's engine; on SQLite they get one of their own, on the same file.
    """

    def __init__(self, database: Database) -> None:
        self._database = database
        self._engine: AsyncEngine | None = None
        self._own_engine = False
        self._opening = asyncio.Lock()
        self._tasks: DatabaseTaskStore | None = None
        self._push: DatabasePushNotificationConfigStore | None = None

    def _engine_for_sdk(self) -> AsyncEngine:
        if self._engine is None:
            if isinstance(self._database, EngineDatabase):
                self._engine = self._database.engine
            else:
                self._engine = open_engine(self._database.url)
                self._own_engine = True
        return self._engine

    async def tasks(self) -> DatabaseTaskStore:
        async with self._opening:
            if self._tasks is None:
                module = load_sql_module("a2a.server.tasks.database_task_store")
                store = module.DatabaseTaskStore(self._engine_for_sdk())
                await store.initialize()
                self._tasks = store
        return self._tasks

    async def push_configs(self) -> DatabasePushNotificationConfigStore:
        async with self._opening:
            if self._push is None:
                module = load_sql_module(PUSH_STORE_MODULE)
                store = module.DatabasePushNotificationConfigStore(self._engine_for_sdk())
                await store.initialize()
                self._push = store
        return self._push

    async def aclose(self) -> None:
        """Disposes of the engine made for the SDK (the store's own closes with it)."""
        if self._engine is not None and self._own_engine:
            await self._engine.dispose()
