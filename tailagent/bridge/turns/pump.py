"""The agent's events of a running turn, published until the turn parks or ends.

While a request streams a turn, each event the agent sends is published, decided by a
rule, parked on for the caller's answer, or ends the turn (done, failed, a budget
crossed, loop protection). What the agent says changes here; how a turn is started,
answered or taken back does not.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import TaskState

from tailagent.agents.events import (
    AgentEvent,
    PermissionAsked,
    PermissionDecision,
    QuestionAsked,
    TurnDone,
    TurnFailed,
    UsageUpdated,
)
from tailagent.bridge.conversations.sessions import SessionPool
from tailagent.bridge.conversations.workplace import Conversations
from tailagent.bridge.parts import text_part
from tailagent.bridge.turns.permissions import PermissionDecisions, request_key
from tailagent.bridge.turns.runtime import DRAIN_TIMEOUT, Runtimes, TaskRuntime, log
from tailagent.cost.turns import TurnCosts, checked_turn, turn_cost
from tailagent.output.metrics import PROMPTS

# The stop reason of a turn its agent ended at its budget (the Claude Agent SDK's
# `max_budget_usd`), and of one tailagent ended as it crossed a budget.
BUDGET_STOP = "max_budget_usd"


class Pump:
    def __init__(
        self,
        pool: SessionPool,
        runtimes: Runtimes,
        decisions: PermissionDecisions,
        costs: TurnCosts,
        conversations: Conversations,
    ) -> None:
        self._pool = pool
        self._runtimes = runtimes
        self._decisions = decisions
        self._costs = costs
        self._conversations = conversations

    async def run(self, runtime: TaskRuntime, updater: TaskUpdater) -> None:
        runtime.pump = asyncio.current_task()
        try:
            await self._pump_events(runtime, updater)
        except Exception:
            # A turn broken by a fault of ours would hold its agent process for good:
            # the process goes (mid-turn, it cannot serve another), the task fails.
            await self._pool.discard(runtime.context_id)
            await self._runtimes.end(runtime)
            await self._costs.release(runtime)  # what it cost is not known: held no more
            raise
        finally:
            runtime.pump = None

    async def _next(self, runtime: TaskRuntime) -> AgentEvent:
        """The agent's next event; a stream that ends or breaks is a failed turn."""
        try:
            return await anext(runtime.events)
        except StopAsyncIteration:
            return TurnFailed("The agent ended its turn without a result.")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("task %s: agent turn failed", runtime.task_id)
            await self._pool.discard(runtime.context_id)
            return TurnFailed(f"The agent failed: {exc}")

    async def _pump_events(self, runtime: TaskRuntime, updater: TaskUpdater) -> None:
        publisher = runtime.publisher
        while True:
            event = await self._next(runtime)
            if runtime.cancelled:
                await self._costs.settle(runtime)  # what it cost before the cancel
                if runtime.stop_reason is not None:
                    # The caller's open stream gets the end, not a cut connection.
                    await publisher.fail(updater, runtime.stop_reason, "server_stopped")
                return
            if isinstance(event, PermissionAsked):
                if not await self._decided(runtime, event, updater):
                    return
                continue
            if isinstance(event, QuestionAsked):
                await self._park(runtime, event, updater)
                return
            if isinstance(event, TurnDone):
                await self._done(runtime, event, updater)
                return
            if isinstance(event, TurnFailed):
                await self._runtimes.end(runtime)
                await self._costs.settle(runtime)  # what it cost before failing
                await self._turn_ended(runtime)  # what it changed before failing is kept
                await publisher.fail(updater, event.message)
                return
            if isinstance(event, UsageUpdated):
                # No stream shows usage yet; publishing it would fail the turn.
                if event.cost_usd is not None and (
                    stop := await self._costs.crossed(runtime, event)
                ):
                    await self._stop_at_budget(runtime, stop, updater)
                    return
                continue
            await publisher.publish(updater, event)

    async def _decided(
        self, runtime: TaskRuntime, event: PermissionAsked, updater: TaskUpdater
    ) -> bool:
        """True when a rule decided the request and the turn goes on; False when the
        turn parked for the caller's answer or loop protection ended it."""
        if request_key(event) in runtime.denied:
            why = f"Stopped: the agent requested the same denied permission again ({event.tool})."
            by = "tailagent (loop protection)"
            await self._decisions.record(runtime, event, False, why, by, "tailagent")
            await self._decisions.interrupt(runtime, event, "already denied", why, updater)
            return False
        if await self._decisions.apply_rule(runtime, event, updater):
            return True
        await self._park(runtime, event, updater)
        return False

    async def _done(self, runtime: TaskRuntime, event: TurnDone, updater: TaskUpdater) -> None:
        await self._runtimes.end(runtime)
        outcome: dict[str, Any] = {"agentSessionId": runtime.session.session_id}
        event = checked_turn(event, runtime)
        outcome.update(await self._costs.count(runtime, turn_cost(event, runtime)))
        if (worktree := await self._turn_ended(runtime)) is not None:
            outcome["worktree"] = worktree
        if event.stop_reason == BUDGET_STOP:
            why = self._costs.agent_budget_text(runtime)
            await _fail_at_budget(runtime, why, outcome, updater)
            return
        if worktree is not None and "error" in worktree:
            # Its answer stands, its work is not committed: the person must act (a FIFO
            # to remove, a tampered .git), and a completed task would say all is well.
            why = f"The turn's work was not committed: {worktree['error']}"
            await runtime.publisher.status(
                updater, TaskState.TASK_STATE_FAILED, "worktree", [text_part(why)], outcome
            )
            return
        await runtime.publisher.finish(updater, event, outcome, close=runtime.watched)

    async def _stop_at_budget(self, runtime: TaskRuntime, why: str, updater: TaskUpdater) -> None:
        """Ends a turn that crossed a budget as its agent's own budget stop ends one: the
        agent is told to stop, what the turn cost is kept, the task fails saying why."""
        with contextlib.suppress(Exception):
            await runtime.session.cancel()
        done: TurnDone | None = None
        try:
            async with asyncio.timeout(DRAIN_TIMEOUT):
                async for event in runtime.events:
                    if isinstance(event, UsageUpdated) and event.cost_usd is not None:
                        self._costs.running_total(runtime, event)
                    elif isinstance(event, PermissionAsked | QuestionAsked):
                        await runtime.session.answer(event.request_id, PermissionDecision(False))
                    elif isinstance(event, TurnDone):
                        done = event
        except (TimeoutError, Exception):
            log.warning("task %s: agent did not stop at its budget", runtime.task_id)
        await self._runtimes.end(runtime)
        outcome = await self._costs.count(
            runtime, turn_cost(checked_turn(done or TurnDone(), runtime), runtime)
        )
        await self._turn_ended(runtime)
        await _fail_at_budget(runtime, why, outcome, updater)

    async def _park(
        self, runtime: TaskRuntime, event: PermissionAsked | QuestionAsked, updater: TaskUpdater
    ) -> None:
        """The turn waits for the caller's answer, however long (across a restart too)."""
        runtime.pending = event
        PROMPTS.labels("permission" if isinstance(event, PermissionAsked) else "question").inc()
        await self._pool.persist()
        await runtime.publisher.ask(updater, event)

    async def _turn_ended(self, runtime: TaskRuntime) -> dict[str, Any] | None:
        return None if runtime.turn is None else await self._conversations.turn_ended(runtime.turn)


async def _fail_at_budget(
    runtime: TaskRuntime, why: str, outcome: dict[str, Any], updater: TaskUpdater
) -> None:
    """The task fails saying which budget stopped it, its cost kept with it."""
    await runtime.publisher.status(
        updater, TaskState.TASK_STATE_FAILED, "budget", [text_part(why)], outcome
    )
