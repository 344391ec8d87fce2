"""A task store that keeps every state a caller must be able to rely on durable,
and coalesces the rest.

a2a-sdk saves the whole task on every event of a turn: each streamed chunk and
each working status costs a SQLite transaction. Through this store only three
kinds of save reach the database at once: a task's first save, and every save
that leaves it in a final or paused state (the states a caller acts on). The
saves in between (a task that is still working) are kept in memory and written
by one background writer within WRITE_DELAY, the latest snapshot per task. Reads of
a task this process holds come from memory.

After a crash, a task may therefore miss the last intermediate updates of the
turn that crashed, and reads as failed by the restart rule anyway; nothing a
caller saw as finished or waiting for them is ever lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from a2a.server.context import ServerCallContext
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.tasks import TaskStore
from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, Task, TaskState

from tailagent.bridge.state import UNFINISHED_STATES, WRITE_DELAY, MintedIds

log = logging.getLogger(__name__)

_DEFERRABLE = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)


class CoalescingTaskStore(TaskStore):
    def __init__(self, inner: TaskStore) -> None:
        self._inner = inner
        # task id -> (owner, latest snapshot, call context that wrote it)
        self._held: dict[str, tuple[str, Task, ServerCallContext]] = {}
        # Ids this process just minted for new tasks: nothing can be stored under them yet.
        self.minted = MintedIds()
        self._dirty: set[str] = set()
        self._writer: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()

    async def save(self, task: Task, context: ServerCallContext) -> None:
        owner = resolve_user_scope(context)
        snapshot = Task()
        snapshot.CopyFrom(task)
        first = task.id not in self._held
        self.minted.discard(task.id)
        self._held[task.id] = (owner, snapshot, context)
        if first or task.status.state not in _DEFERRABLE:
            self._dirty.discard(task.id)
            async with self._write_lock:
                await self._inner.save(snapshot, context)
            if task.status.state not in UNFINISHED_STATES:
                self._held.pop(task.id, None)
            return
        self._dirty.add(task.id)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_dirty(), name="task-store-writer")

    async def _write_dirty(self, delay: float = WRITE_DELAY) -> None:
        # Waiting a moment lets a burst of updates (or the turn's own end, which is
        # written at once) supersede most of them.
        await asyncio.sleep(delay)
        while self._dirty:
            task_id = self._dirty.pop()
            held = self._held.get(task_id)
            if held is None:
                continue
            _, snapshot, context = held
            try:
                async with self._write_lock:
                    await self._inner.save(snapshot, context)
            except Exception:
                log.exception("writing task %s", task_id)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        held = self._held.get(task_id)
        if held is not None:
            owner, snapshot, _ = held
            if owner != resolve_user_scope(context):
                return None
            copy = Task()
            copy.CopyFrom(snapshot)
            return copy
        if task_id in self.minted:
            return None
        return await self._inner.get(task_id, context)

    async def flush(self) -> None:
        """Writes every deferred save; after it returns the database is current."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await self._writer
        await self._write_dirty(delay=0)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        await self.flush()
        return await self._inner.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        self._held.pop(task_id, None)
        self._dirty.discard(task_id)
        await self._inner.delete(task_id, context)
