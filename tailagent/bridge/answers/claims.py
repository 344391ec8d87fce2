"""A prompt is answered once: which answer holds each task's pending prompt, and who
answered the prompts a late answer may still name.

Two answers sent at once must not both apply (a person allows `rm -rf build` while
another denies it), and an answer that arrives after the prompt was answered must say
who answered it, not be applied to whatever the agent asks next. The judge takes the
hold as an answer is admitted (judging.py), the applier settles it (turns/applying.py), and
the executor gives it back or drops it as a request fails or a turn ends; the rules
live in one place.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from a2a.server.context import ServerCallContext

from tailagent.bridge.answers.records import (
    AlreadyAnswered,
    Answerer,
    AnswerRecord,
    first_answer_text,
)

CLAIM_KEY = "tailagent.claim"
# Answered prompts remembered to refuse late answers: enough for every prompt a
# person could still be looking at, bounded so a long-running server stays small.
ANSWERED_LIMIT = 4096


@dataclass(eq=False)
class Claim:
    """One answer's hold on a task's pending prompt, from its admission until it is
    applied (`record` set) or given back; while it holds, other answers are refused."""

    task_id: str
    request_id: str
    answerer: Answerer
    record: AnswerRecord | None = None

    def refusal(self) -> str:
        return first_answer_text(self.task_id, self.request_id, self.record or self.answerer)


def claim_of(context: ServerCallContext | None) -> Claim | None:
    claim = context.state.get(CLAIM_KEY) if context is not None else None
    return claim if isinstance(claim, Claim) else None


class Claims:
    def __init__(self) -> None:
        # task id -> the latest claim on its prompt; kept once applied, until the task
        # parks on another prompt or its turn ends.
        self._held: dict[str, Claim] = {}
        self._answered: OrderedDict[tuple[str, str], AnswerRecord] = OrderedDict()

    def take(
        self, task_id: str, request_id: str | None, answerer: Answerer, context: ServerCallContext
    ) -> None:
        """Holds the prompt `request_id` (None: the task has none pending) for the
        answer `context` carries. Raises AlreadyAnswered while another answer holds it,
        and after one was applied while the task is not parked again."""
        held = self._held.get(task_id)
        if held is not None and (held.record is None or request_id is None):
            raise AlreadyAnswered(held.refusal())
        if request_id is not None:
            claim = Claim(task_id, request_id, answerer)
            self._held[task_id] = claim
            context.state[CLAIM_KEY] = claim

    def give_back(self, context: ServerCallContext) -> None:
        """The prompt this request claimed is answerable again, if its answer was not
        applied (the request failed first)."""
        claim = claim_of(context)
        if claim is not None and claim.record is None and self.holds(claim):
            del self._held[claim.task_id]

    def holds(self, claim: Claim) -> bool:
        return self._held.get(claim.task_id) is claim

    def settle(self, task_id: str, claim: Claim | None, record: AnswerRecord) -> None:
        """Remembers an applied answer: the task's claim now names it, and so does the
        bounded record that refuses late answers naming the prompt."""
        held = claim or Claim(task_id, record.request_id, record.answerer)
        held.record = record
        self._held[task_id] = held
        self._answered[(task_id, record.request_id)] = record
        while len(self._answered) > ANSWERED_LIMIT:
            self._answered.popitem(last=False)

    def answered(self, task_id: str, request_id: str) -> AnswerRecord | None:
        return self._answered.get((task_id, request_id))

    def drop(self, task_id: str) -> None:
        """The task's turn ended: nothing of it is held any more."""
        self._held.pop(task_id, None)
