"""Which A2A task states are still going and which are over, and how the server ends
a task it could not finish (`mark_failed`: a failed turn, a stop, a restart).

At the bottom of the house: the store, the bridge and push delivery all ask it, and
none of them should have to import another for it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from a2a.types.a2a_pb2 import Message, Part, Role, Task, TaskState

UNFINISHED_STATES = (
    TaskState.TASK_STATE_SUBMITTED,
    TaskState.TASK_STATE_WORKING,
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
)
# Still going, and asking nobody anything: a follow-up to one has nothing to answer.
BUSY_STATES = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
ENDED_STATES = (
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
)


def mark_failed(task: Task, text: str, kind: str) -> None:
    """Ends a task the server could not finish, with a status that says why."""
    if task.status.HasField("message"):
        task.history.append(task.status.message)  # the last prompt or progress stays readable
    task.status.state = TaskState.TASK_STATE_FAILED
    task.status.timestamp.FromDatetime(datetime.now(UTC))
    task.status.message.CopyFrom(
        Message(
            message_id=f"{kind}-{task.id}",
            role=Role.ROLE_AGENT,
            task_id=task.id,
            context_id=task.context_id,
            parts=[Part(text=text)],
        )
    )
    task.status.message.metadata.update({"kind": kind})
