"""The checks an answer to a waiting task passes before it is admitted.

A prompt is answered once, by a caller allowed to: an answer is bound to the prompt
its sender could see, a second answer is refused naming who answered first, and a
permission prompt needs the approver role. These change with what a prompt is and
who may answer it (bridge/answers/meaning.py, bridge/answers/waiting.py), not with admission's other
rules, so they stand apart from it.
"""

from __future__ import annotations

from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import Message, Task
from a2a.utils.errors import InvalidRequestError

from tailagent.access.identity import caller_of
from tailagent.agents.events import PermissionAsked
from tailagent.bridge.answers.applying import reply_of
from tailagent.bridge.answers.meaning import first_answer_text, reply_request_id
from tailagent.bridge.answers.waiting import waiting_of
from tailagent.bridge.turns.executor import BridgeExecutor


def bind_answer(message: Message, stored: Task) -> None:
    """An answer that names no prompt is for the one its sender could see: the one
    the task shows. Named in the message, it is refused once another answer took
    that prompt (the stored task may still show it a moment after the turn moved
    on), rather than applied to what came next or taken for a new prompt."""
    waiting = waiting_of(stored)
    if waiting is not None and not reply_request_id(reply_of(message)):
        message.metadata.update({"requestId": waiting.prompt.request_id})


def refuse_second_answer(executor: BridgeExecutor, message: Message) -> None:
    """An answer naming a prompt this server saw answered is refused, naming who
    answered first, rather than restated as stale or refused as "still working"."""
    request_id = reply_request_id(reply_of(message))
    first = executor.answered(message.task_id, request_id) if request_id else None
    if first is not None:
        raise InvalidRequestError(
            message=first_answer_text(message.task_id, first.request_id, first)
        )


def check_approver(executor: BridgeExecutor, task_id: str, context: ServerCallContext) -> None:
    """An answer to a permission prompt needs the approver role. Refused here,
    the prompt stays pending, untouched, for a caller who has it."""
    caller = caller_of(context)
    if isinstance(executor.pending(task_id), PermissionAsked) and not (
        caller and caller.may("approver")
    ):
        who = caller.owner if caller else "this caller"
        raise InvalidRequestError(
            message=(
                f"{who} may not answer permission prompts (it lacks the approver role); "
                f"task {task_id} stays waiting for a caller who has it."
            )
        )
