"""A caller's answer applied to the prompt a turn is parked on: the turn path's door
into answers/, as `answers/judging.py` is the request path's.

`reading.py` says what a reply means and `records.py` who decided what; this module
does what follows from one on a live turn: the claim settled, who decided published,
the audit row written, loop protection counted, and the agent told (or, for a task
taken back after a restart, prompted again with the answer).
"""

from __future__ import annotations

from dataclasses import replace

from a2a.server.context import ServerCallContext
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import Message, TaskState

from tailagent.agents.events import PermissionAsked, PromptText, TurnOptions
from tailagent.bridge.answers import withdrawal
from tailagent.bridge.answers.claims import Claim, Claims, claim_of
from tailagent.bridge.answers.reading import AnswerError, parse_answer, reply_of
from tailagent.bridge.answers.records import (
    DEFAULT_VIA,
    AlreadyAnswered,
    AnswerRecord,
    decision_text,
    record_of,
)
from tailagent.bridge.answers.requester import Requester
from tailagent.bridge.answers.waiting import resume_text
from tailagent.bridge.conversations.workplace import signature
from tailagent.bridge.parts import text_part
from tailagent.bridge.turns.permissions import PermissionDecisions, request_key
from tailagent.bridge.turns.runtime import TaskRuntime
from tailagent.delegation.session import DelegatingSession


class AnswerApplier:
    def __init__(
        self, claims: Claims, decisions: PermissionDecisions, max_permission_denials: int
    ) -> None:
        self._claims = claims
        self._decisions = decisions
        self._max_denials = max_permission_denials

    async def apply(
        self,
        runtime: TaskRuntime,
        message: Message,
        updater: TaskUpdater,
        call: ServerCallContext,
        requester: Requester,
    ) -> bool:
        """Applies an answer and publishes who decided what; False when the turn
        does not go on (the question restated, or loop protection ended it)."""
        pending = runtime.pending
        assert pending is not None
        if (request_id := withdrawal.withdrawing(call)) is not None:
            return await self._withdraw(runtime, request_id, updater, call)
        claim = claim_of(call)
        try:
            parsed = parse_answer(reply_of(message), pending)
        except AnswerError as exc:
            self._claims.give_back(call)  # the prompt is still pending: answerable again
            await runtime.publisher.ask(updater, pending, note=str(exc))
            return False
        record = record_of(pending, parsed, claim.answerer if claim else requester.answerer)
        await self._settle(runtime, claim, record, updater)
        if isinstance(pending, PermissionAsked) and not parsed.denied and runtime.turn:
            who = record.answerer
            via = f" via {who.via}" if who.via != DEFAULT_VIA else ""
            runtime.turn.approvals.append(f"{signature(who.by, who.node)}{via}: {pending.tool}")
        if isinstance(pending, PermissionAsked):
            allow = not parsed.denied
            await self._decisions.record(
                runtime, pending, allow, parsed.reason, requester.audit_name, requester.owner
            )
        if isinstance(pending, PermissionAsked) and parsed.denied:
            runtime.denied.add(request_key(pending))
            runtime.denials += 1
            if runtime.denials >= self._max_denials:
                reason = (
                    f"Stopped: {runtime.denials} permission denials in this task "
                    f"(limit {self._max_denials})."
                )
                await self._decisions.interrupt(runtime, pending, parsed.reason, reason, updater)
                return False
        if runtime.restored:
            runtime.restored = False
            text = resume_text(pending, parsed, record)
            runtime.events = runtime.session.prompt([PromptText(text)], TurnOptions())
            return True
        # Signed with who answered: a delegated prompt's answer goes on to the peer as theirs.
        answer = replace(parsed.answer, answerer=record.answerer.by)
        await runtime.session.answer(pending.request_id, answer)
        return True

    async def _withdraw(
        self, runtime: TaskRuntime, request_id: str, updater: TaskUpdater, call: ServerCallContext
    ) -> bool:
        """Settles the relayed question `request_id` as closed on its peer, and the turn
        goes on without an answer; False (nothing changes) when it is no longer the
        question the turn waits on, or a person's answer holds it already (theirs
        applies: the hand-off then finds the peer no longer asks, and says so)."""
        pending = runtime.pending
        if pending is None or pending.request_id != request_id or not pending.relayed_from:
            return False
        record = withdrawal.record(pending)
        try:
            self._claims.take(runtime.task_id, request_id, record.answerer, call)
        except AlreadyAnswered:
            return False
        await self._settle(runtime, claim_of(call), record, updater)
        if isinstance(runtime.session, DelegatingSession):  # the one that relays questions
            runtime.session.withdrawn(request_id)
        return True

    async def _settle(
        self, runtime: TaskRuntime, claim: Claim | None, record: AnswerRecord, updater: TaskUpdater
    ) -> None:
        """The prompt is decided (`record`): held as such, and the turn said to go on."""
        self._claims.settle(runtime.task_id, claim, record)
        runtime.pending = None
        await runtime.publisher.status(
            updater,
            TaskState.TASK_STATE_WORKING,
            "resumed",
            [text_part(decision_text(record))],
            record.metadata(),
        )
