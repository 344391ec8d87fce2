"""The a2a-sdk AgentExecutor: runs agent turns for A2A tasks.

A turn that asks the caller something publishes input-required and returns from
`execute()`, while the agent itself stays parked inside its turn. The caller's
follow-up message calls `execute()` again; the pending prompt lives in the register of
live turns (`runtime`), keyed by task id, not inside one `execute()` call.

A prompt is answered once. The executor keeps the claims on pending prompts and
hands them, with its view of each task's pending prompt, to the answer judge
(`judge`, bridge/answers/judging.py), the request path's one door into answers:
admission asks it which prompt a follow-up answers and whether its sender may, and
last holds the prompt for it; until that answer is applied or given back, any other
answer to the task is refused naming who came first, and once applied, the record
of who decided what refuses late answers that name the prompt.

This class routes each request to its part, each in its own module: who the caller is
(answers/requester.py, read once per request), starting a turn (turns/start.py), the
agent's events (turns/pump.py), an answer (turns/applying.py), the rules and the
audit (turns/permissions.py), costs and budgets (cost/turns.py) and tasks taken back
after a restart (turns/restore.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import cast

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import SendMessageRequest, Task, TaskState

from tailagent.agents.events import AgentBackend, PermissionAsked, Prompting
from tailagent.bridge.answers import withdrawal
from tailagent.bridge.answers.claims import Claims, claim_of
from tailagent.bridge.answers.judging import AnswerJudge
from tailagent.bridge.answers.requester import requester_of
from tailagent.bridge.answers.waiting import Waiting
from tailagent.bridge.conversations.sessions import SessionPool
from tailagent.bridge.conversations.workplace import Conversations, Shared
from tailagent.bridge.parts import text_part
from tailagent.bridge.turns import reservations, tck
from tailagent.bridge.turns.applying import AnswerApplier
from tailagent.bridge.turns.numbering import NumberingQueue
from tailagent.bridge.turns.permissions import PermissionDecisions
from tailagent.bridge.turns.publish import Publisher, open_task
from tailagent.bridge.turns.pump import Pump
from tailagent.bridge.turns.restore import Restorer
from tailagent.bridge.turns.runtime import Runtimes, TaskRuntime
from tailagent.bridge.turns.start import TurnStarter
from tailagent.config import AttachmentSettings
from tailagent.config.tool_rules import Rule
from tailagent.cost.budgets import Spending
from tailagent.cost.turns import TurnCosts
from tailagent.delegation.outbound import DelegatorFactory
from tailagent.delegation.session import DELEGATED, DelegatingSession
from tailagent.sandbox.fences import FenceReport
from tailagent.store.audit import AuditLog
from tailagent.store.events import TaskEvents
from tailagent.store.tasks import UNSEEN_UNTIL_SETTLED


class BridgeExecutor(AgentExecutor):
    def __init__(
        self,
        backend: AgentBackend,
        pool: SessionPool,
        audit: AuditLog,
        *,
        max_permission_denials: int = 3,
        rules: tuple[Rule, ...] = (),
        workspace: Path | None = None,
        attachment_settings: AttachmentSettings | None = None,
        conversations: Conversations | None = None,
        spending: Spending | None = None,
        fence: FenceReport | None = None,
        delegators: DelegatorFactory | None = None,
        events: TaskEvents | None = None,
    ) -> None:
        """`fence` says how agent processes are sandboxed (mode, network): kept with each
        turn's task and each audited decision. `delegators` gives people's turns the
        tools to hand work to other tailagents."""
        conversations = conversations or Shared("not configured")
        workspace = workspace or Path.cwd()
        costs = TurnCosts(spending)
        self._events = events
        self._backend = backend
        self._costs = costs
        self._claims = Claims()
        self._runtimes = Runtimes(pool, self._claims)
        self._decisions = PermissionDecisions(audit, rules, workspace, self._runtimes, fence)
        self._restorer = Restorer(
            backend.name, conversations, pool, self._claims, self._runtimes, delegators
        )
        self._starter = TurnStarter(
            conversations,
            pool,
            self._runtimes,
            costs,
            workspace,
            attachment_settings or AttachmentSettings(),
            fence,
            delegators,
        )
        self._answers = AnswerApplier(self._claims, self._decisions, max_permission_denials)
        self._judge = AnswerJudge(self._claims, self.pending, self.holds)
        self._pump = Pump(pool, self._runtimes, self._decisions, costs, conversations)
        self._conversations = conversations

    def restore(self, tasks: list[Task]) -> None:
        """Takes back the tasks a previous run left waiting for an answer (answers/waiting.py)."""
        self._restorer.keep(tasks)

    def pending(self, task_id: str) -> Prompting | None:
        """The prompt a task is parked on, if any."""
        runtime = self._runtimes.get(task_id)
        if runtime is not None:
            return runtime.pending
        return self._restorer.prompt(task_id)

    @property
    def judge(self) -> AnswerJudge:
        """Which prompt a follow-up answers and whether its sender may: admission's to ask."""
        return self._judge

    def release(self, context: ServerCallContext) -> None:
        """Gives back the prompt this request claimed, if its answer was not applied
        (the request failed first): the prompt is answerable again."""
        self._claims.give_back(context)

    def turns_into_task(self, params: SendMessageRequest) -> bool:
        """Whether a new message becomes a task of this executor's (every message but
        the echo agent's TCK scenarios, which answer as the TCK asks)."""
        return self._backend.name != "echo" or tck.scenario_of(params.message) is None

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id or ""
        new = context.current_task is None
        # The first turn of a task whose request shows it to nobody before it settles
        # (store/tasks.py's UNSEEN_UNTIL_SETTLED): no stream gets its events, so none
        # can miss one. They are numbered, for the next turn to number on, not kept.
        call = context.call_context
        unseen = new and call is not None and bool(call.state.get(UNSEEN_UNTIL_SETTLED))
        try:
            queue = await self._numbering(context, event_queue, new, keep=not unseen)
            await self._execute(context, queue, watched=not unseen)
        finally:
            if task_id not in self._runtimes:
                if self._events is not None:
                    self._events.forget(task_id)  # its next turn may run on another server
                # Its turn counted and gave back its reservation, or never started.
                await self._costs.give_back(reservations.held(call))
            await self._over(context.context_id or "")

    async def _numbering(
        self, context: RequestContext, queue: EventQueue, new: bool = False, keep: bool = True
    ) -> EventQueue:
        """The turn's queue, numbering its events when the store keeps events."""
        task_id = context.task_id
        if self._events is None or not task_id:
            return queue
        await self._events.start(task_id, new, context.current_task)
        return cast("EventQueue", NumberingQueue(queue, self._events, task_id, keep))

    async def _over(self, context_id: str) -> None:
        """Once no turn of the conversation is alive (not running, not waiting for an
        answer), its branch goes if it holds nothing: every way a turn ends passes here
        or through `cancel`, so none leaves an empty branch behind."""
        if context_id and not any(r.context_id == context_id for r in self._runtimes.all()):
            await self._conversations.turn_over(context_id)

    async def _execute(
        self, context: RequestContext, event_queue: EventQueue, *, watched: bool
    ) -> None:
        message = context.message
        assert message is not None and context.task_id and context.context_id
        task_id, context_id = context.task_id, context.context_id
        first_turn = context.current_task is None
        if withdrawal.withdrawing(context.call_context) and not self._runtimes.parked_on(task_id):
            return  # the question is gone already (answered, the turn over): nothing to take
        scenario = tck.scenario_of(message) if self._backend.name == "echo" else None
        if scenario is not None and task_id not in self._runtimes:
            await tck.run(scenario, message, task_id, context_id, first_turn, event_queue)
            return
        if first_turn:
            await open_task(message, task_id, context_id, event_queue)
        updater = TaskUpdater(event_queue, task_id, context_id)
        runtime = self._runtimes.get(task_id)
        claim = claim_of(context.call_context)
        if claim is not None and not self._claims.holds(claim):
            # Given back (its request failed before this ran) or its turn ended: the
            # prompt is gone or another answer's by now, so this one applies nowhere.
            return
        requester = requester_of(context.call_context)
        if runtime is None and (waiting := self._restorer.pop(task_id)) is not None:
            runtime = await self._restorer.take_back(waiting, requester, updater)
            if runtime is None:
                return
        if runtime is not None and runtime.pending is not None:
            call = context.call_context
            if not await self._answers.apply(runtime, message, updater, call, requester):
                return
        elif runtime is None:
            publisher = Publisher(task_id, context_id)
            reservation = reservations.take(context.call_context)
            if reservation is not None and reservation.settled:
                await publisher.fail(updater, reservations.WITHDRAWN)
                return
            runtime = await self._starter.start(publisher, message, requester, updater)
            if runtime is None:
                return
            runtime.reservation = reservation
        else:
            # The guard refuses messages for a working task before they get here.
            await Publisher(task_id, context_id).fail(updater, "Task is already running.")
            return
        runtime.watched = watched
        await self._pump.run(runtime, updater)

    @property
    def running(self) -> int:
        return len(self._runtimes)

    async def drained(self, seconds: float) -> bool:
        """Waits, at most `seconds`, until no turn is working (those waiting for a
        person's answer wait on, as at any stop); whether none is."""
        deadline = asyncio.get_running_loop().time() + seconds
        while len(self._runtimes) > self._runtimes.parked():
            if asyncio.get_running_loop().time() >= deadline:
                return False
            await asyncio.sleep(0.1)
        return True

    @property
    def waiting(self) -> int:
        """Tasks waiting for an answer: they outlast a stop (see answers/waiting.py)."""
        return self._runtimes.parked() + len(self._restorer)

    async def stop_all(self, reason: str, grace: float = 5.0) -> list[str]:
        """At server stop: every turn is told to stop. A turn a request is streaming
        ends its stream with `reason` (their ids are returned); the store records why
        the others (waiting for an answer) ended (`CoalescingTaskStore.close_held`)."""
        runtimes = self._runtimes.all()
        pumps = {r.task_id: r.pump for r in runtimes if r.pump is not None}
        for runtime in runtimes:
            runtime.cancelled = True
            runtime.stop_reason = reason
            waits_on_peer = runtime.pending and runtime.pending.request_id.startswith(DELEGATED)
            if waits_on_peer and isinstance(runtime.session, DelegatingSession):
                runtime.session.leave_peers()  # its hand-off outlasts the stop, as it does
        await asyncio.gather(
            *(runtime.session.cancel() for runtime in runtimes), return_exceptions=True
        )
        if pumps:
            await asyncio.wait(pumps.values(), timeout=grace)
        for runtime in runtimes:
            await self._runtimes.end(runtime)
        return list(pumps)

    @staticmethod
    async def _said_canceled(updater: TaskUpdater) -> None:
        await Publisher(updater.task_id, updater.context_id).status(
            updater,
            TaskState.TASK_STATE_CANCELED,
            "canceled",
            [text_part("The task was canceled by the caller.")],
        )

    def holds(self, task_id: str) -> bool:
        """Whether a turn of this task is alive here (running, or waiting for an answer,
        also one taken back after a restart): its cancel must reach `cancel`, which
        alone gives its agent session back and records the refused prompt."""
        return task_id in self._runtimes or task_id in self._restorer

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id or ""
        context_id = context.context_id or ""
        event_queue = await self._numbering(context, event_queue)
        runtime = self._runtimes.get(task_id)
        waiting = self._restorer.pop(task_id)
        held: TaskRuntime | Waiting | None = runtime or waiting
        pending = runtime.pending if runtime is not None else waiting.prompt if waiting else None
        if held is not None and isinstance(pending, PermissionAsked):
            # A prompt nobody will answer now: the audit says who refused it by cancelling.
            canceller = requester_of(context.call_context)
            await self._decisions.record(
                held, pending, False, "task canceled", canceller.audit_name, canceller.owner
            )
        updater = TaskUpdater(event_queue, task_id, context_id)
        # A running turn's end is said before its agent is stopped: once stopped, the
        # turn returns and the SDK may close the stream of the request that started it,
        # which would end on "working" (a hand-off to another box takes a while to end).
        running = runtime is not None and runtime.pump is not None
        if runtime is not None:
            runtime.cancelled = True  # the turn publishes nothing more
        if running:
            await self._said_canceled(updater)
        if runtime is not None:
            await runtime.session.cancel()
            if pending is not None:
                # Nobody is iterating a parked turn: close it here, or it leaks.
                with contextlib.suppress(Exception):
                    await runtime.events.aclose()  # type: ignore[attr-defined]
                await self._costs.settle(runtime)
            await self._runtimes.end(runtime)
        self._claims.drop(task_id)
        if not running:
            await self._said_canceled(updater)
        if self._events is not None:
            self._events.forget(task_id)
        await self._over(context_id)
