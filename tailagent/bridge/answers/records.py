"""Who decided what: the record an answer leaves, and the sentences that tell it.

A task shows each decision, a second answer is refused naming the first, and an
agent taken back after a restart is told who decided: so the record and its wording
live in one place, pure, and every face of the server words a decision alike. What a
reply means is reading.py's; who holds a prompt, claims.py's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from tailagent.agents.events import Prompting, QuestionAnswers, QuestionAsked
from tailagent.bridge.answers.reading import ParsedAnswer

# The channel an answer came through when the request says nothing (the web page says "web").
DEFAULT_VIA = "a2a"

# "closed": a relayed question its peer answered or closed there (withdrawal.py).
Decision = Literal["allow", "deny", "answer", "closed"]
_VERBS: dict[Decision, str] = {
    "allow": "allowed",
    "deny": "denied",
    "answer": "answered",
    "closed": "closed",
}


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Answerer:
    """Who answered a prompt, from which device, through which channel, and when.

    `by` is a person's login, a tagged node's tags, or `token:<name>`: what a
    reader recognises, without the kind prefixes task owners carry.
    """

    by: str
    node: str = ""
    via: str = DEFAULT_VIA
    at: datetime = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class AnswerRecord:
    """One prompt's decision, kept so the task can show it and a second answer be
    refused naming it."""

    request_id: str
    decision: Decision
    detail: str  # a denial's reason, or the labels a question was answered with
    answerer: Answerer

    def metadata(self) -> dict[str, str]:
        """The decision as status metadata, for clients that read fields, not words."""
        who = self.answerer
        return {
            "requestId": self.request_id,
            "decision": self.decision,
            "answeredBy": who.by,
            "answeredFrom": who.node,
            "via": who.via,
            "answeredAt": who.at.astimezone(UTC).isoformat(timespec="seconds"),
        }


class AlreadyAnswered(ValueError):
    """An answer to a prompt someone else answered (or is answering) first."""


def record_of(pending: Prompting, parsed: ParsedAnswer, answerer: Answerer) -> AnswerRecord:
    """What a parsed answer decided, in the record's terms."""
    if isinstance(pending, QuestionAsked):
        labels = parsed.answer.answers if isinstance(parsed.answer, QuestionAnswers) else {}
        return AnswerRecord(pending.request_id, "answer", ", ".join(labels.values()), answerer)
    if parsed.denied:
        return AnswerRecord(pending.request_id, "deny", parsed.reason, answerer)
    return AnswerRecord(pending.request_id, "allow", "", answerer)


def answerer_text(answerer: Answerer) -> str:
    """`alice@example.com from laptop`, `tag:ci from ci-runner via web`, `token ci-bot`."""
    name = answerer.by
    if name.startswith("token:"):
        name = "token " + name.removeprefix("token:")
    device = f" from {answerer.node}" if answerer.node else ""
    channel = f" via {answerer.via}" if answerer.via != DEFAULT_VIA else ""
    return name + device + channel


def decision_text(record: AnswerRecord) -> str:
    """The sentence a task shows for a decision: `denied by alice@example.com from
    laptop via web: not on main`. Pure, so every face of the server words it alike."""
    detail = f": {record.detail}" if record.detail and record.decision != "allow" else ""
    return f"{_VERBS[record.decision]} by {answerer_text(record.answerer)}{detail}"


def first_answer_text(task_id: str, request_id: str, first: AnswerRecord | Answerer) -> str:
    """Why a second answer is refused: who came first (and what they decided, once applied)."""
    if isinstance(first, AnswerRecord):
        what, at = f": {decision_text(first)}", first.answerer.at
    else:
        what, at = f" by {answerer_text(first)}", first.at
    when = f"{at.astimezone(UTC):%H:%M:%S} UTC"
    return f"request {request_id} of task {task_id} was already answered{what} at {when}"
