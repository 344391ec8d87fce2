"""Signals between servers that share one store.

A task's turn lives in the process that runs it (its agent, its event queue, its
push deliveries), so a request about it that reaches another server is handed over
through the database: the server that got it writes a signal, and the runner picks
it up within POLL_INTERVAL. Two kinds exist: `cancel` (the runner ends the turn as
it ends any cancelled turn; the requester answers once the stored task reads
canceled) and `push` (a push config was added there: the runner starts delivering).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime

from tailagent.store.database import Database

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.2
# How long a requester waits for the runner to confirm a cancel, before saying it did not.
CONFIRM_TIMEOUT = 10.0
CANCEL = "cancel"
PUSH = "push"

_DELETE = "DELETE FROM task_signals WHERE task_id = :t AND kind = :k"
# (task id, its owner) -> done
SignalHandler = Callable[[str, str], Awaitable[None]]


class TaskSignals:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def initialize(self) -> None:
        await self._db.execute(
            "CREATE TABLE IF NOT EXISTS task_signals ("
            " task_id TEXT NOT NULL, kind TEXT NOT NULL, sent_at TEXT NOT NULL,"
            " PRIMARY KEY (task_id, kind))"
        )

    async def send(self, task_id: str, kind: str) -> None:
        await self._db.execute(
            "INSERT INTO task_signals (task_id, kind, sent_at) VALUES (:t, :k, :at)"
            " ON CONFLICT (task_id, kind) DO NOTHING",
            {"t": task_id, "k": kind, "at": datetime.now(UTC).isoformat()},
        )

    async def withdraw(self, task_id: str, kind: str) -> None:
        await self._db.execute(_DELETE, {"t": task_id, "k": kind})

    async def take(self, running: set[str]) -> list[tuple[str, str]]:
        """The signals for tasks in `running`, as (task id, kind), removed as taken.
        Only the runner of a task takes its signals, so a read then a delete lose none."""
        rows = await self._db.fetch("SELECT task_id, kind FROM task_signals")
        mine = [(task_id, kind) for task_id, kind in rows if task_id in running]
        if mine:
            await self._db.execute(_DELETE, [{"t": task_id, "k": kind} for task_id, kind in mine])
        return mine

    async def watch(
        self, running: Callable[[], dict[str, str]], handlers: Mapping[str, SignalHandler]
    ) -> None:
        """Runs for the server's life, acting on the signals for the tasks this process
        runs (task id -> owner, from `running`)."""
        failing = False  # one log line per outage, not one per poll
        while True:
            await asyncio.sleep(POLL_INTERVAL)
            owners = running()
            if not owners:
                continue
            try:
                taken = await self.take(set(owners))
            except Exception as exc:
                if not failing:
                    log.warning("cannot read signals from the store (%s); retrying", exc)
                failing = True
                continue
            failing = False
            for task_id, kind in taken:
                log.info("task %s: %s, as another server asked", task_id, kind)
                try:
                    await handlers[kind](task_id, owners[task_id])
                except Exception:
                    log.exception("task %s: acting on a %s signal", task_id, kind)
