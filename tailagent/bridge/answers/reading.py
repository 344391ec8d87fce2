"""Reading what a caller's follow-up means for the pending prompt.

A structured data part always wins over text, because an app that sends one meant
exactly that. Free text is for people: it allows only when the reply clearly says
yes and nothing says no; anything unclear denies, since a privilege is granted
explicitly or not at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from a2a.types.a2a_pb2 import Message
from google.protobuf.json_format import MessageToDict

from tailagent.agents.events import (
    Answer,
    PermissionAsked,
    PermissionDecision,
    Prompting,
    QuestionAnswers,
    QuestionAsked,
)

ALLOW_WORDS = frozenset(
    {"yes", "y", "oui", "ok", "okay", "sure", "allow", "go", "vas-y", "d'accord", "autorise"}
)
DENY_WORDS = frozenset(
    {"no", "non", "deny", "refuse", "nope", "stop", "cancel", "annule", "jamais"}
)
MAX_FREE_TEXT_WORDS = 8
UNCLEAR_REASON = "the reply was not a clear yes or no"
_EDGE_PUNCTUATION = '"“”«».,;:!?()[]{}…'


def deny_message(reason: str) -> str:
    """What an agent that reads words is told on a denial.

    The second sentence matters: without it a model treats the reason as feedback
    on the attempt and asks for the same permission again, forever.
    """
    return (
        f"The user denied this action ({reason}). Do not request the same permission "
        "again; pick another approach or finish the task and explain."
    )


FreeTextVerdict = Literal["allow", "deny", "unclear"]


def classify_free_text(text: str) -> FreeTextVerdict:
    """The decision table for a free-text reply to a permission prompt."""
    words = [w.strip(_EDGE_PUNCTUATION) for w in text.lower().replace("’", "'").split()]
    words = [w for w in words if w]
    has_deny = any(w in DENY_WORDS for w in words)
    if has_deny:
        return "deny"
    if len(words) > MAX_FREE_TEXT_WORDS:
        return "unclear"
    if any(w in ALLOW_WORDS for w in words):
        return "allow"
    return "unclear"


@dataclass(frozen=True, slots=True)
class Reply:
    """What a follow-up message carries, before it meets a pending prompt."""

    text: str
    data: tuple[dict[str, Any], ...] = ()
    request_id: str | None = None


def reply_of(message: Message) -> Reply:
    """The words, data parts and named prompt a follow-up message carries."""
    texts = [p.text for p in message.parts if p.HasField("text")]
    data = tuple(
        item
        for p in message.parts
        if p.HasField("data")
        for item in [MessageToDict(p.data)]
        if isinstance(item, dict)
    )
    meta = MessageToDict(message.metadata) if message.HasField("metadata") else {}
    request_id = meta.get("requestId")
    return Reply(" ".join(texts), data, request_id if isinstance(request_id, str) else None)


class AnswerError(ValueError):
    """A reply that cannot be applied to the pending prompt; the pause stands."""


@dataclass(frozen=True, slots=True)
class ParsedAnswer:
    answer: Answer
    denied: bool
    reason: str = ""


def reply_request_id(reply: Reply) -> str | None:
    for item in reply.data:
        if isinstance(item.get("requestId"), str):
            return item["requestId"]
    return reply.request_id


def parse_answer(reply: Reply, pending: Prompting) -> ParsedAnswer:
    """Applies the answer rules; raises AnswerError when the reply names another prompt."""
    request_id = reply_request_id(reply)
    if request_id and request_id != pending.request_id:
        raise AnswerError(
            f"This answer is for request {request_id}, but the pending request is "
            f"{pending.request_id}; nothing was applied."
        )
    if isinstance(pending, PermissionAsked):
        return _permission(reply, pending)
    return _question(reply, pending)


def _pick_option(pending: PermissionAsked, allow: bool) -> str | None:
    for option in pending.options:
        if option.allows == allow:
            return option.id
    return None


def _decided(pending: PermissionAsked, allow: bool, reason: str = "") -> ParsedAnswer:
    option = _pick_option(pending, allow)
    if allow:
        return ParsedAnswer(PermissionDecision(True, option), denied=False)
    reason = reason or "no reason given"
    return ParsedAnswer(
        PermissionDecision(False, option, deny_message(reason), reason=reason),
        denied=True,
        reason=reason,
    )


def _permission(reply: Reply, pending: PermissionAsked) -> ParsedAnswer:
    for item in reply.data:
        if item.get("kind") == "permission_response":
            decision = item.get("decision")
            if decision not in ("allow", "deny"):
                raise AnswerError('permission_response.decision must be "allow" or "deny"')
            return _decided(pending, decision == "allow", str(item.get("reason") or ""))
    option_match = re.fullmatch(r"\s*option:(\S+)\s*", reply.text)
    if option_match:
        chosen = next((o for o in pending.options if o.id == option_match.group(1)), None)
        if chosen is None:
            known = ", ".join(o.id for o in pending.options) or "none"
            raise AnswerError(f"unknown option {option_match.group(1)!r}; options: {known}")
        if chosen.allows:
            return ParsedAnswer(PermissionDecision(True, chosen.id), denied=False)
        reason = f"chose {chosen.name}"
        return ParsedAnswer(
            PermissionDecision(False, chosen.id, deny_message(reason)), denied=True, reason=reason
        )
    verdict = classify_free_text(reply.text)
    if verdict == "allow":
        return _decided(pending, True)
    if verdict == "deny":
        return _decided(pending, False, reply.text.strip())
    return _decided(pending, False, UNCLEAR_REASON)


def _question(reply: Reply, pending: QuestionAsked) -> ParsedAnswer:
    for item in reply.data:
        answers = item.get("answers")
        if isinstance(answers, dict):
            known = {q.question for q in pending.questions}
            unknown = [q for q in answers if q not in known]
            if unknown:
                raise AnswerError(f"no such question: {unknown[0]!r}")
            return ParsedAnswer(
                QuestionAnswers({str(k): str(v) for k, v in answers.items()}), denied=False
            )
    text = reply.text.strip()
    if not text:
        raise AnswerError("the reply has no answer: send text or a data part with answers")
    first = pending.questions[0].question
    return ParsedAnswer(QuestionAnswers({first: text}), denied=False)
