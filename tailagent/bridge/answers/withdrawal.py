"""A relayed question taken back from the person: its peer answered or closed it there.

When this box's turn hands work to a peer and the peer's agent asks something, the
question is put to the person here (delegation/relay.py). The peer's own owner may
answer it there, or the peer's task may end; a question that lives on here would then
be answered for nothing, and the person told so only afterwards. So the hand-off reads
the peer while the person is asked (delegation/peer_task.py), and once the peer no
longer asks, the question is withdrawn here:

- the server sends the parked task a follow-up of its own (`message`), carrying the
  question's request id in its call context (`WITHDRAWING`), which no caller can set:
  the turn goes on through the SDK's request path as it would for an answer, so its
  events reach every stream, the store and push, and its status says why;
- the applier settles the question with `record` as any answer is, so of the person's
  answer and the withdrawal exactly one applies, and a late answer is refused naming
  who closed the question and where;
- a withdrawal that finds the question gone (answered, or the turn over) changes
  nothing, and never starts a turn.
"""

from __future__ import annotations

import uuid

from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import Message, Part, Role

from tailagent.agents.events import Prompting
from tailagent.bridge.answers.records import Answerer, AnswerRecord

WITHDRAWING = "tailagent.withdrawing"
WHY = "the question was answered or closed where it was asked"


def withdrawing(context: ServerCallContext | None) -> str | None:
    """The request id of the question this server-made request takes back, if it is one."""
    request_id = context.state.get(WITHDRAWING) if context is not None else None
    return request_id if isinstance(request_id, str) else None


def message(task_id: str, context_id: str, request_id: str) -> Message:
    """The follow-up that takes the question back: its words are what the task's history
    shows in place of an answer."""
    made = Message(
        message_id=uuid.uuid4().hex, role=Role.ROLE_USER, task_id=task_id, context_id=context_id
    )
    made.parts.append(Part(text=f"(withdrawn: {WHY})"))
    made.metadata.update({"requestId": request_id})
    return made


def record(pending: Prompting) -> AnswerRecord:
    """The question's decision: closed by the peer that asked it."""
    peer = pending.relayed_from or "the peer"
    detail = "answered or closed there, no longer asked here"
    return AnswerRecord(pending.request_id, "closed", detail, Answerer(peer))
