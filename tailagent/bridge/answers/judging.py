"""The request path's one door into answers: which prompt a follow-up answers, and
whether this person may give that answer, once.

A prompt is answered once, by a caller allowed to: an answer is bound to the prompt
its sender could see, a second answer is refused naming who answered first, a
permission prompt needs the approver role, and of two answers sent at once exactly
one holds the prompt. Admission asks here twice, in its order of refusals: `judge`
with the other checks of a follow-up, `hold` as its very last step. The judge is
handed the executor's claims and its view of each task's pending prompt, and each
request's person as the handler read it, so it never calls back into the executor or
admission, nor reads the caller again; applying an answer to the turn is
`turns/applying.py`'s.
"""

from __future__ import annotations

from collections.abc import Callable

from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import Message, Task
from a2a.utils.errors import InvalidRequestError
from google.protobuf.json_format import MessageToDict

from tailagent.agents.events import PermissionAsked, Prompting
from tailagent.bridge.answers.claims import Claims
from tailagent.bridge.answers.reading import reply_of, reply_request_id
from tailagent.bridge.answers.records import AlreadyAnswered, first_answer_text
from tailagent.bridge.answers.requester import Requester
from tailagent.bridge.answers.waiting import waiting_of
from tailagent.store.finality import BUSY_STATES, ENDED_STATES

# A stored task in one of these waits for no answer: admission refuses a follow-up to
# it in its own words ("has already …", "is still working"), not as an answer.
WAITS_FOR_NONE = (*ENDED_STATES, *BUSY_STATES)


class AnswerJudge:
    """Says which prompt of task T a follow-up answers, and refuses it (an
    InvalidRequestError saying why) when this person may not give that answer now."""

    def __init__(
        self,
        claims: Claims,
        pending: Callable[[str], Prompting | None],
        alive: Callable[[str], bool],
    ) -> None:
        """`pending`: the prompt a task is parked on; `alive`: whether a turn of the
        task lives here (running, waiting, or taken back after a restart)."""
        self._claims = claims
        self._pending = pending
        self._alive = alive

    def judge(self, message: Message, stored: Task, person: Requester) -> None:
        """Binds the answer to its prompt, refuses a second answer and, for a task that
        waits for one, an answer its sender may not give. A task that waits for none is
        left to admission's own words ("has already …", "is still working")."""
        request_id = self._bind(message, stored)
        self._refuse_second(message.task_id, request_id)
        if stored.status.state not in WAITS_FOR_NONE:
            self._check_person(message.task_id, stored, person)
            self._check_approver(message.task_id, person)

    def hold(self, task_id: str, person: Requester, context: ServerCallContext) -> None:
        """Holds the task's pending prompt for the answer this request carries.

        Synchronous, and called last in admission: nothing runs between the check and
        the hold, so of two answers sent at once exactly one gets it. Refused while
        another answer holds the prompt, and after one was applied while the task is
        not parked again (the stored task may still read input-required then; letting
        this answer on would fail the task).
        """
        if not self._alive(task_id):
            return
        prompt = self._pending(task_id)
        request_id = prompt.request_id if prompt is not None else None
        try:
            self._claims.take(task_id, request_id, person.answerer, context)
        except AlreadyAnswered as exc:
            raise InvalidRequestError(message=str(exc)) from None

    def _bind(self, message: Message, stored: Task) -> str | None:
        """An answer that names no prompt is for the one its sender could see: the one
        the task shows. Named in the message, it is refused once another answer took
        that prompt (the stored task may still show it a moment after the turn moved
        on), rather than applied to what came next or taken for a new prompt."""
        request_id = reply_request_id(reply_of(message))
        waiting = waiting_of(stored)
        if waiting is not None and not request_id:
            request_id = waiting.prompt.request_id
            message.metadata.update({"requestId": request_id})
        return request_id

    def _refuse_second(self, task_id: str, request_id: str | None) -> None:
        """An answer naming a prompt this server saw answered is refused, naming who
        answered first, rather than restated as stale or refused as "still working"."""
        first = self._claims.answered(task_id, request_id) if request_id else None
        if first is not None:
            raise InvalidRequestError(message=first_answer_text(task_id, first.request_id, first))

    def _check_person(self, task_id: str, stored: Task, person: Requester) -> None:
        """A question a peer relayed here is answered by the person it asks, no one
        else: the peer's task is theirs, the answer goes there signed as theirs, and
        what this box knows of who else the peer lets answer for them is nothing (the
        peer's own owner answers there). Refused here, before anything reaches the
        peer, and the prompt stays pending for them."""
        pending = self._pending(task_id)
        if pending is None or not pending.relayed_from:
            return
        # A prompt kept by a tailagent from before relayedFor: the person of the turn.
        asked = pending.relayed_for or _requested_by(stored)
        caller = person.caller
        if caller is not None and caller.kind == "user" and caller.login == asked:
            return
        who = caller.who if caller else "this caller"
        raise InvalidRequestError(
            message=(
                f"{who} may not answer this question: {pending.relayed_from}'s agent asks it of "
                f"{asked}, in work handed there for them, and only {asked} may answer it "
                f"(the answer goes to {pending.relayed_from} as theirs); task {task_id} stays "
                f"waiting for {asked}."
            )
        )

    def _check_approver(self, task_id: str, person: Requester) -> None:
        """An answer to a permission prompt needs the approver role. Refused here,
        the prompt stays pending, untouched, for a caller who has it."""
        if isinstance(self._pending(task_id), PermissionAsked) and not person.may("approver"):
            who = person.owner if person.caller else "this caller"
            raise InvalidRequestError(
                message=(
                    f"{who} may not answer permission prompts (it lacks the approver role); "
                    f"task {task_id} stays waiting for a caller who has it."
                )
            )


def _requested_by(stored: Task) -> str:
    """Whose turn the stored task runs (its `requestedBy`), "" when it does not say."""
    metadata = MessageToDict(stored.metadata) if stored.HasField("metadata") else {}
    asker = metadata.get("requestedBy")
    return str(asker.get("who") or "") if isinstance(asker, dict) else ""
