"""The two ways a new task starts besides a2a-sdk's own path.

A quick send: a blocking send whose task nobody sees before it ends or waits runs in
bridge/requests/quick.py, after the checks the SDK's path would make. A streamed task
that must wait for its place is made and stored at once, so its caller sees it
submitted rather than nothing. Both copy a part of the SDK's path, so they change
when the SDK does.
"""

from __future__ import annotations

from a2a.helpers import new_task_from_user_message
from a2a.server.agent_execution import RequestContextBuilder
from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import Message, SendMessageRequest, Task
from a2a.utils.proto_utils import validate_proto_required_fields
from a2a.utils.task import apply_history_length, validate_history_length

from tailagent.bridge.conversations.sessions import SessionPool
from tailagent.bridge.requests.in_flight import TurnGate
from tailagent.bridge.requests.quick import QuickTurns
from tailagent.store.tasks import CoalescingTaskStore


class TaskStarts:
    """Starts a quick send's task, or a waiting stream's, where the SDK would not."""

    def __init__(
        self,
        quick: QuickTurns,
        gate: TurnGate,
        builder: RequestContextBuilder,
        store: CoalescingTaskStore,
        pool: SessionPool,
    ) -> None:
        self._quick = quick
        self._gate = gate
        self._builder = builder
        self._store = store
        self._pool = pool

    async def quick(self, params: SendMessageRequest, context: ServerCallContext) -> Task:
        """A new task nobody sees before it ends or waits, run by bridge/requests/quick.py after
        the checks the SDK's path makes."""
        validate_proto_required_fields(params)
        validate_history_length(params.configuration)
        request = await self._builder.build(
            params=params,
            task_id=None,
            context_id=params.message.context_id or None,
            task=None,
            context=context,
        )
        async with self._gate.turn():
            task = await self._quick.send(request, context)
        return apply_history_length(task, params.configuration)

    async def submitted(self, message: Message, context: ServerCallContext) -> Task:
        """The task of a stream that must wait for its place, made and stored now so
        the caller sees it at once, submitted, instead of nothing until a place frees.
        The message then names it, and the SDK takes it up as it would a follow-up
        (the message is in its history already, so the SDK does not add it again)."""
        task = new_task_from_user_message(message)
        task.id = self._store.minted.generate()
        task.context_id = message.context_id or self._pool.minted_contexts.generate()
        message.task_id, message.context_id = task.id, task.context_id
        await self._store.save(task, context)
        return task
