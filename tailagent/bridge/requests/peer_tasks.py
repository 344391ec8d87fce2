"""Tasks another tailagent server runs, in a store several servers share.

Such a task's turn and events live on that server only: a follow-up or a subscription
naming it is carried there for a person (cluster/carry.py), refused with its URL for
anyone else; a cancel is signalled to it and waited for (it
answers through the store); a push config added here is signalled so that server
delivers. This changes with how servers sharing a store talk (store/signals.py),
not with the rules for one server's own tasks.
"""

from __future__ import annotations

import asyncio

from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import Task, TaskState
from a2a.utils.errors import InternalError, TaskNotCancelableError, UnsupportedOperationError

from tailagent.cluster.carry import carry_to
from tailagent.store.signals import CANCEL, CONFIRM_TIMEOUT, POLL_INTERVAL, PUSH, TaskSignals
from tailagent.store.tasks import CoalescingTaskStore


def runs_elsewhere(
    task_id: str, url: str, advice: str, context: ServerCallContext
) -> UnsupportedOperationError:
    """The refusal of a request only the server that runs the task can serve; the
    request is carried there instead when it can be (cluster/carry.py)."""
    carry_to(context.state, url)
    return UnsupportedOperationError(
        message=(
            f"Task {task_id} runs on another tailagent server that shares this store "
            f"({url}); {advice}"
        )
    )


class PeerTasks:
    """What this server does for a task another server sharing the store runs."""

    def __init__(self, store: CoalescingTaskStore, signals: TaskSignals) -> None:
        self._store = store
        self._signals = signals

    async def cancel(self, task_id: str, elsewhere: str, context: ServerCallContext) -> Task:
        """Asks the server at `elsewhere` to cancel the task, and waits for the store
        to show it canceled there."""
        await self._signals.send(task_id, CANCEL)
        for _ in range(int(CONFIRM_TIMEOUT / POLL_INTERVAL)):
            await asyncio.sleep(POLL_INTERVAL)
            task = await self._store.get(task_id, context)
            if task is None or self._store.runs_elsewhere(task) is None:
                break
        else:
            await self._signals.withdraw(task_id, CANCEL)
            raise InternalError(
                message=(
                    f"The server that runs task {task_id} ({elsewhere}) did not confirm the "
                    f"cancel within {CONFIRM_TIMEOUT:.0f} s; it may be down. Its unfinished "
                    "tasks are closed when it starts again."
                )
            )
        if task is None or task.status.state != TaskState.TASK_STATE_CANCELED:
            state = TaskState.Name(task.status.state) if task else "gone"
            raise TaskNotCancelableError(message=f"Task {task_id} ended first: {state}")
        return task

    async def push_config_added(self, task_id: str, context: ServerCallContext) -> None:
        """A push config was saved for the task: if another server runs it, that server
        delivers, so it is told to read the task's configs again."""
        stored = await self._store.get(task_id, context)
        if stored is not None and self._store.runs_elsewhere(stored) is not None:
            await self._signals.send(task_id, PUSH)
