"""A quick blocking send, run without a2a-sdk's per-task machinery.

A blocking SendMessage that starts a new task, with no push config, in a store no
other server reads, shows its task to nobody through A2A before it is final or
waiting (see store/tasks.py's `UNSEEN_UNTIL_SETTLED`): nobody can subscribe to it,
and only the desk, which reads the store's snapshots, sees it run. a2a-sdk would still
run it as any task: an ActiveTask with a producer and a consumer task and queues
between them. Here the executor's events go straight into the SDK's own TaskManager,
which folds each into the task and saves it through the store, as the SDK's consumer
does. The turn runs in a task of its own, so a caller that goes away does not stop
it, and a cancel finds it here (`cancel`), in the SDK's order: the executor's
cancel first, then the turn.
"""

from __future__ import annotations

import asyncio
import logging

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import Event, EventQueue
from a2a.server.tasks import TaskManager, TaskStore
from a2a.types.a2a_pb2 import Task
from a2a.utils.errors import A2AError

from tailagent.store.finality import ENDED_STATES, mark_failed

log = logging.getLogger(__name__)


class _IntoTask(EventQueue):
    """The queue the executor writes to: each event folded into the task at once.
    Like the SDK's consumer, it takes nothing after the task has ended."""

    def __init__(self, manager: TaskManager) -> None:
        self.manager = manager

    async def enqueue_event(self, event: Event) -> None:
        current = await self.manager.get_task()
        if current is not None and current.status.state in ENDED_STATES:
            log.debug("an event for ended task %s dropped: %s", current.id, type(event))
            return
        await self.manager.process(event)


class QuickTurns:
    def __init__(self, executor: AgentExecutor, store: TaskStore) -> None:
        self._executor = executor
        self._store = store
        self._running: dict[str, tuple[RequestContext, _IntoTask, asyncio.Task[None]]] = {}

    async def send(self, request: RequestContext, context: ServerCallContext) -> Task:
        """Runs the new task's turn until it ends or waits; returns the task."""
        task_id = request.task_id or ""
        manager = TaskManager(self._store, context, task_id, request.context_id, request.message)
        queue = _IntoTask(manager)
        turn = asyncio.ensure_future(self._executor.execute(request, queue))
        self._running[task_id] = (request, queue, turn)
        turn.add_done_callback(lambda _: self._running.pop(task_id, None))
        try:
            await asyncio.shield(turn)
        except asyncio.CancelledError:
            if not turn.cancelled():
                raise  # the request went away; the turn goes on
        except Exception as exc:
            if isinstance(exc, A2AError) and await manager.get_task() is None:
                raise  # refused before its task was stored (store/keeping.py's StoreFull)
            log.exception("the turn of task %s failed", task_id)
            await self._fail(manager, exc)
        task = await manager.get_task()
        assert task is not None, "the executor opens every task it runs"
        return task

    async def cancel(self, task_id: str, context: ServerCallContext) -> Task | None:
        """Cancels a quick turn of this server's; None if there is none by that id."""
        running = self._running.get(task_id)
        if running is None:
            return None
        request, queue, turn = running
        current = await queue.manager.get_task()
        cancel = RequestContext(
            call_context=context,
            task_id=task_id,
            context_id=request.context_id,
            task=current,
        )
        try:
            await self._executor.cancel(cancel, queue)
        finally:
            turn.cancel()
            await asyncio.wait({turn})
        return await queue.manager.get_task()

    @staticmethod
    async def _fail(manager: TaskManager, exc: Exception) -> None:
        task = await manager.get_task()
        if task is None or task.status.state in ENDED_STATES:
            return
        mark_failed(task, f"The turn failed: {type(exc).__name__}: {exc}", "turn_failed")
        await manager.process(task)
