"""Cancels between servers that share one store.

A task's turn lives in the process that runs it (its agent, its event queue), so a
cancel that reaches another server is handed over through the database: the server
that got the request writes it down, the runner picks it up within POLL_INTERVAL
and ends the turn as it ends any cancelled turn, and the requester answers once
the stored task reads canceled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.2
# How long a requester waits for the runner to confirm, before saying it did not.
CONFIRM_TIMEOUT = 10.0


class CancelRequests:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def initialize(self) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                text(
                    "CREATE TABLE IF NOT EXISTS cancel_requests ("
                    " task_id TEXT PRIMARY KEY, requested_at TEXT NOT NULL)"
                )
            )

    async def request(self, task_id: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO cancel_requests (task_id, requested_at) VALUES (:t, :at)"
                    " ON CONFLICT (task_id) DO NOTHING"
                ),
                {"t": task_id, "at": datetime.now(UTC).isoformat()},
            )

    async def withdraw(self, task_id: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                text("DELETE FROM cancel_requests WHERE task_id = :t"), {"t": task_id}
            )

    async def take(self, running: set[str]) -> list[str]:
        """The requests for tasks in `running`, removed as they are taken."""
        async with self._engine.begin() as conn:
            rows = await conn.execute(text("SELECT task_id FROM cancel_requests"))
            mine = [task_id for (task_id,) in rows if task_id in running]
            if mine:
                await conn.execute(
                    text("DELETE FROM cancel_requests WHERE task_id = :t"),
                    [{"t": task_id} for task_id in mine],
                )
        return mine

    async def watch(
        self,
        running: Callable[[], dict[str, str]],
        cancel: Callable[[str, str], Awaitable[object]],
    ) -> None:
        """Runs for the server's life: cancels the tasks this process runs (task id ->
        owner from `running`) when another server asked for it."""
        while True:
            await asyncio.sleep(POLL_INTERVAL)
            owners = running()
            if not owners:
                continue
            try:
                for task_id in await self.take(set(owners)):
                    log.info("cancelling task %s, as another server asked", task_id)
                    await cancel(task_id, owners[task_id])
            except Exception:
                log.exception("taking cancel requests from the shared store")
