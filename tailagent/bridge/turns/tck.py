"""The scenarios of the official A2A TCK, acted out when the echo agent is configured.

The TCK drives its system under test by messageId prefix (see the TCK's
`scenarios/*.feature`). These scenarios need A2A shapes no coding agent emits
(a direct Message, file and data artifacts, a rejected task), so they live here,
on the A2A side, rather than in the echo backend. Unknown prefixes fall through
to the echo agent, which completes them like any prompt.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import Message, Part, Role

from tailagent.bridge.parts import data_part
from tailagent.bridge.turns.publish import open_task

Scenario = Callable[[TaskUpdater], Awaitable[None]]


def _agent_text(updater: TaskUpdater, text: str) -> Message:
    return updater.new_agent_message([Part(text=text)])


async def _complete_hello(u: TaskUpdater) -> None:
    await u.complete(_agent_text(u, "Hello from TCK"))


async def _input_required(u: TaskUpdater) -> None:
    await u.requires_input(_agent_text(u, "The TCK asks for input."))


async def _reject(u: TaskUpdater) -> None:
    await u.reject(_agent_text(u, "rejected"))


def _artifact_then_complete(*parts: Part, streamed: bool = False) -> Scenario:
    async def scenario(u: TaskUpdater) -> None:
        if streamed:
            await u.start_work()
        await u.add_artifact(list(parts))
        await u.complete()

    return scenario


def _stream_text(text: str) -> Scenario:
    return _artifact_then_complete(Part(text=text), streamed=True)


async def _stream_chunked(u: TaskUpdater) -> None:
    await u.start_work()
    await u.add_artifact([Part(text="chunk-1 ")], artifact_id="chunked", append=True)
    await u.add_artifact(
        [Part(text="chunk-2")], artifact_id="chunked", append=True, last_chunk=True
    )
    await u.complete()


async def _stream_completed(u: TaskUpdater) -> None:
    await u.complete()


async def _slow_for_resubscribe(u: TaskUpdater) -> None:
    await u.start_work()
    await asyncio.sleep(4)
    await u.complete()


_FILE = Part(raw=b"tck", filename="output.txt", media_type="text/plain")
_FILE_URL = Part(
    url="https://example.com/output.txt", filename="output.txt", media_type="text/plain"
)

SCENARIOS: dict[str, Scenario] = {
    "tck-complete-task": _complete_hello,
    "tck-input-required": _input_required,
    "tck-reject-task": _reject,
    "tck-artifact-text": _artifact_then_complete(Part(text="Generated text content")),
    "tck-artifact-file-url": _artifact_then_complete(_FILE_URL),
    "tck-artifact-file": _artifact_then_complete(_FILE),
    "tck-artifact-data": _artifact_then_complete(data_part({"key": "value", "count": 42})),
    "tck-stream-001": _stream_text("Stream hello from TCK"),
    "tck-stream-002": _stream_completed,
    "tck-stream-003": _stream_text("Stream task lifecycle"),
    "tck-stream-ordering-001": _stream_text("Ordered output"),
    "tck-stream-artifact-text": _stream_text("Streamed text content"),
    "tck-stream-artifact-file": _artifact_then_complete(_FILE, streamed=True),
    "tck-stream-artifact-chunked": _stream_chunked,
    "test-resubscribe-message-id": _slow_for_resubscribe,
}
DIRECT_MESSAGE = "tck-message-response"
# Longest first, so `tck-artifact-file-url` wins over `tck-artifact-file`.
_PREFIXES = sorted([*SCENARIOS, DIRECT_MESSAGE], key=len, reverse=True)


def scenario_of(message: Message) -> str | None:
    return next((p for p in _PREFIXES if message.message_id.startswith(p)), None)


async def run(
    prefix: str,
    message: Message,
    task_id: str,
    context_id: str,
    first_turn: bool,
    event_queue: EventQueue,
) -> None:
    if prefix == DIRECT_MESSAGE and first_turn:
        reply = Message(
            message_id=f"reply-{message.message_id}",
            role=Role.ROLE_AGENT,
            context_id=context_id,
            parts=[Part(text="Direct message response")],
        )
        await event_queue.enqueue_event(reply)
        return
    if first_turn:
        await open_task(message, task_id, context_id, event_queue)
    updater = TaskUpdater(event_queue, task_id, context_id)
    scenario = SCENARIOS.get(prefix, _complete_hello)
    await scenario(updater)
