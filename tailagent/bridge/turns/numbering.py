"""The event queue a turn publishes into, numbering each status and artifact update on
its way to a2a-sdk's queue (store/events.py keeps them for a stream taken up again)."""

from __future__ import annotations

from a2a.server.events import Event, EventQueue

from tailagent.store.events import TaskEvents


class NumberingQueue:
    """Stands in for the SDK's EventQueue where a turn enqueues (TaskUpdater, the first
    Task): the one method a publisher calls, numbered; the rest is the SDK's queue."""

    def __init__(
        self, queue: EventQueue, events: TaskEvents, task_id: str, keep: bool = True
    ) -> None:
        self._queue = queue
        self._events = events
        self._task_id = task_id
        self._keep = keep

    async def enqueue_event(self, event: Event) -> None:
        self._events.number(self._task_id, event, keep=self._keep)
        await self._queue.enqueue_event(event)

    def __getattr__(self, name: str) -> object:
        return getattr(self._queue, name)
