"""Which A2A task states are still going and which are over.

At the bottom of the house: the store, the bridge and push delivery all ask it, and
none of them should have to import another for it.
"""

from __future__ import annotations

from a2a.types.a2a_pb2 import TaskState

UNFINISHED_STATES = (
    TaskState.TASK_STATE_SUBMITTED,
    TaskState.TASK_STATE_WORKING,
    TaskState.TASK_STATE_INPUT_REQUIRED,
    TaskState.TASK_STATE_AUTH_REQUIRED,
)
ENDED_STATES = (
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
)
