"""A peer's question, shown on this box, and the person's answer, sent back there.

A peer's task that waits publishes its prompt as this project's servers do
(bridge/turns/publish.py: a status message whose data part is a permission_request or
an ask_user_question). Here it becomes the same prompt in this box's turn, said to be
the peer's ("devbox-2's agent asks to run `rm -rf build`"), with the same options and
the same questions, so that the answer maps back exactly: the reply names the peer's
request id and carries the option the person chose, or the answers keyed by the
peer's own question texts (bridge/answers/reading.py is how the peer reads it).
"""

from __future__ import annotations

import uuid
from typing import Any

from a2a.types.a2a_pb2 import Message, Part, Role
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value

from tailagent.agents.events import (
    Answer,
    PermissionAsked,
    PermissionDecision,
    PermissionOption,
    Prompting,
    Question,
    QuestionAnswers,
    QuestionAsked,
    QuestionOption,
)

_KINDS = ("allow_once", "allow_always", "reject_once", "reject_always")


class NotAPrompt(ValueError):
    """The peer waits, but not with a prompt this box can relay; str() says what."""


def prompt_of(message: Message, peer: str, person: str) -> Prompting:
    """The peer's waiting prompt as this box's own, attributed to `peer` and put to
    `person` alone (whose work it is); its request id is the peer's."""
    for part in message.parts:
        if not part.HasField("data"):
            continue
        data = MessageToDict(part.data)
        if not isinstance(data, dict):
            continue
        if data.get("kind") == "permission_request":
            return _permission(data, peer, person)
        if data.get("kind") == "ask_user_question":
            return _question(data, peer, person)
    text = " ".join(p.text for p in message.parts if p.HasField("text")).strip()
    raise NotAPrompt(f"{peer} waits for input this box cannot relay: {text or 'no prompt'}")


def _permission(data: dict[str, Any], peer: str, person: str) -> PermissionAsked:
    title = str(data.get("title") or data.get("toolName") or "act")
    options = tuple(
        PermissionOption(str(o.get("optionId")), str(o.get("name") or ""), o["kind"])
        for o in data.get("options") or []
        if isinstance(o, dict) and o.get("kind") in _KINDS
    )
    tool_input = data.get("input")
    return PermissionAsked(
        request_id=str(data.get("requestId") or ""),
        tool=str(data.get("toolName") or ""),
        input=tool_input if isinstance(tool_input, dict) else {},
        title=f"{peer}'s agent asks to {title[:1].lower()}{title[1:]}",
        reason=str(data.get("decisionReason") or ""),
        options=options,
        relayed_from=peer,
        relayed_for=person,
    )


def _question(data: dict[str, Any], peer: str, person: str) -> QuestionAsked:
    questions = tuple(
        Question(
            question=str(q.get("question") or ""),
            header=f"{peer}'s agent asks" + (f": {q['header']}" if q.get("header") else ""),
            options=tuple(
                QuestionOption(str(o.get("label") or ""), str(o.get("description") or ""))
                for o in q.get("options") or []
                if isinstance(o, dict)
            ),
            multi_select=bool(q.get("multiSelect")),
        )
        for q in data.get("questions") or []
        if isinstance(q, dict)
    )
    return QuestionAsked(str(data.get("requestId") or ""), questions, peer, person)


def reply_to(
    pending: Prompting,
    answer: Answer,
    *,
    task_id: str,
    context_id: str,
    metadata: dict[str, Any],
) -> Message:
    """The follow-up that gives the peer's `pending` prompt the person's `answer`."""
    message = Message(
        message_id=uuid.uuid4().hex, role=Role.ROLE_USER, task_id=task_id, context_id=context_id
    )
    message.metadata.update({"requestId": pending.request_id, **metadata})
    if isinstance(pending, PermissionAsked):
        allow = isinstance(answer, PermissionDecision) and answer.allow
        option = answer.option_id if isinstance(answer, PermissionDecision) else None
        chosen = next((o for o in pending.options if allow and o.id == option), None)
        if chosen is not None and chosen.allows:
            # The option itself: "always" stays "always" on the peer.
            message.parts.append(Part(text=f"option:{chosen.id}"))
            return message
        reason = answer.reason if isinstance(answer, PermissionDecision) else "no decision"
        data: dict[str, Any] = {
            "kind": "permission_response",
            "decision": "allow" if allow else "deny",
            "reason": reason,
        }
    else:
        answers = answer.answers if isinstance(answer, QuestionAnswers) else {}
        data = {"answers": dict(answers)}
    data["requestId"] = pending.request_id
    message.parts.append(Part(data=ParseDict(data, Value()), media_type="application/json"))
    return message
