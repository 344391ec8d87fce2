"""What each turn cost, who it is counted to, and the budgets that stop a turn.

Costs change for reasons of their own (an agent's way of reporting usage, a new
budget): an agent reports a turn's cost itself, or only its session's running total
(ACP `usage_update`), which this module turns into the turn's share. The pump asks
here when a turn ends or reports usage; what it then does with a crossed budget is its
own business.

This is where an agent's figures enter tailagent's books, so this is where a figure
that is no cost (NaN, an infinity, a negative or absurd amount: `costs.usd_figure`) is
refused: logged once per turn, counted on /metrics, never kept.

Budgets hold for a person's turns together: what each running turn has reported so far
is kept in the store (`Usage.running`), so a person's spent-plus-running is what a new
task is admitted against and what stops their running turns at their next report, on
every server that shares the store.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from tailagent.agents.events import TurnDone, UsageUpdated
from tailagent.bridge.turns.runtime import TaskRuntime, log
from tailagent.cost.figures import MAX_SESSION_USD, MAX_TURN_USD, dollars, token_figure, usd_figure
from tailagent.cost.ledger import Cost, Spending
from tailagent.output.metrics import COSTS_REFUSED


def refuse(runtime: TaskRuntime, figure: str, value: object) -> None:
    """Counts a figure that is no cost; says so in the log once per turn."""
    COSTS_REFUSED.labels(figure).inc()
    if not runtime.cost_refused:
        runtime.cost_refused = True
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:40] + "…"
        log.warning(
            "task %s: the agent reported a %s of %s, not a finite number within the "
            "bounds: refused, not counted (further ones of this turn are counted on "
            "/metrics only)",
            runtime.task_id,
            figure,
            shown,
        )


# The token counts of an agent's usage figures, by kind (camelCase or snake_case; cached
# input counts as input).
TOKEN_NAMES = {
    "input": ("inputTokens", "input_tokens", "cacheReadInputTokens", "cache_read_input_tokens",
              "cacheCreationInputTokens", "cache_creation_input_tokens"),
    "output": ("outputTokens", "output_tokens"),
}  # fmt: skip
_DROPPED = object()


def checked_turn(event: TurnDone, runtime: TaskRuntime) -> TurnDone:
    """The end of a turn with only the figures that are costs: its dollars when they
    are a cost, its usage without a token count out of bounds or a number that is not
    finite (at any depth, as a task's metadata must keep it)."""
    cost = event.cost
    if cost is not None and (cost := usd_figure(event.cost)) is None:
        refuse(runtime, "turn cost", event.cost)
    usage = _finite(event.usage, runtime)
    for name in (n for names in TOKEN_NAMES.values() for n in names):
        if name in usage and token_figure(usage[name]) is None:
            refuse(runtime, "token count", usage.pop(name))
    return dataclasses.replace(event, cost=cost, usage=usage)


def _finite(usage: Any, runtime: TaskRuntime) -> Any:
    if isinstance(usage, dict):
        kept = {k: _finite(v, runtime) for k, v in usage.items()}
        return {k: v for k, v in kept.items() if v is not _DROPPED}
    if isinstance(usage, list):
        return [v for v in (_finite(v, runtime) for v in usage) if v is not _DROPPED]
    if (isinstance(usage, float) and not math.isfinite(usage)) or (
        isinstance(usage, int) and not isinstance(usage, bool) and abs(usage) > 2**53
    ):
        refuse(runtime, "usage figure", usage)
        return _DROPPED
    return usage


def turn_cost(event: TurnDone, runtime: TaskRuntime) -> Cost:
    """What a `checked_turn` cost: the agent's own figure, else what the session's
    running cost grew by during the turn; its tokens from the turn's usage."""
    usd = event.cost if event.cost is not None else runtime.session_grew()
    tokens = {
        kind: sum(token_figure(event.usage.get(n)) or 0 for n in names)
        for kind, names in TOKEN_NAMES.items()
    }
    return Cost(usd or 0.0, tokens["input"], tokens["output"])


class TurnCosts:
    def __init__(self, spending: Spending | None) -> None:
        self._spending = spending
        # Without a store (tests of the bridge alone), sessions' running costs live here.
        self._session_costs: dict[str, float] = {}

    async def session_cost(self, session_id: str) -> float | None:
        """The agent session's running cost when its last turn was counted (kept in the
        store: a restart does not charge the session's whole total again)."""
        if self._spending is None:
            return self._session_costs.get(session_id)
        try:
            return await self._spending.usage.session_cost(session_id)
        except Exception:
            log.exception("session %s: reading its last counted cost", session_id)
            return None

    async def count(self, runtime: TaskRuntime, cost: Cost) -> dict[str, Any]:
        """Keeps a turn's cost with its person and task; the task's and its
        conversation's costs, for the task's metadata."""
        runtime.cost = runtime.cost + cost
        if self._spending is None:
            if runtime.session_cost is not None:
                self._session_costs[runtime.session.session_id] = runtime.session_cost
            return {"cost": runtime.cost.as_json()}
        try:
            total = await self._spending.record(
                runtime.owner, runtime.context_id, cost, runtime.session.session_id
            )
            if runtime.session_cost is not None:
                await self._spending.usage.set_session_cost(
                    runtime.session.session_id, runtime.session_cost
                )
        except Exception:
            log.exception("task %s: keeping the turn's cost", runtime.task_id)
            return {"cost": runtime.cost.as_json()}
        return {"cost": runtime.cost.as_json(), "conversationCost": total.as_json()}

    async def settle(self, runtime: TaskRuntime) -> None:
        """Counts what a turn that ends without a result (failed, cancelled) had cost
        by its agent's last report, so neither the person's day nor the session's next
        turn is left to guess it."""
        if runtime.session_cost is not None and not runtime.settled:
            runtime.settled = True
            await self.count(runtime, turn_cost(TurnDone(), runtime))

    def running_total(self, runtime: TaskRuntime, event: UsageUpdated) -> bool:
        """Takes the session's running total an agent reported; False when it is no
        cost (refused, the turn's figures unchanged)."""
        total = usd_figure(event.cost_usd, MAX_SESSION_USD)
        grew = None if total is None else total - (runtime.session_cost_before or 0.0)
        if total is None or (grew is not None and grew > MAX_TURN_USD):
            refuse(runtime, "session's running cost", event.cost_usd)
            return False
        runtime.session_cost = total
        return True

    async def crossed(self, runtime: TaskRuntime, event: UsageUpdated) -> str | None:
        """Why the turn stops now that its session's running cost is `event.cost_usd`
        (a budget it, or its person's turns together, crossed); None while it is within
        them."""
        if not self.running_total(runtime, event) or self._spending is None:
            return None
        grew = runtime.session_grew() or 0.0
        task_limit = self._spending.budgets.per_task_usd
        if task_limit is not None and runtime.cost.usd + grew >= task_limit:
            return self._budget_stop_text(runtime.cost.usd + grew)
        try:
            await self._spending.usage.running(
                runtime.task_id, runtime.session.session_id, runtime.owner, grew
            )
        except Exception:
            log.exception("task %s: keeping what the turn has cost so far", runtime.task_id)
        budget = await self._spending.daily_budget(runtime.owner)
        if budget is None:
            return None
        spent = await self._spending.usage.spent(runtime.owner)
        if spent < budget[0]:
            return None
        which = "their own daily budget" if budget[1] else "budgets.per_caller_daily_usd"
        return (
            f"Stopped: {dollars(spent)} spent today (running turns included) reached "
            f"the daily budget of {dollars(budget[0])} ({which})."
        )

    def _budget_stop_text(self, spent: float) -> str:
        """Why tailagent ended a turn whose task crossed `budgets.per_task_usd`."""
        limit = self._spending.budgets.per_task_usd if self._spending else None
        return (
            f"Stopped: this task reached its budget of {dollars(limit or 0)} "
            f"(budgets.per_task_usd); it cost {dollars(spent)}."
        )

    def agent_budget_text(self, runtime: TaskRuntime) -> str:
        """Why the agent ended a turn at its own budget (Claude Code's `max_budget_usd`,
        which it counts over its whole session, not one task)."""
        limit = self._spending.budgets.per_task_usd if self._spending else None
        given = f" of {dollars(limit)} (budgets.per_task_usd)" if limit is not None else ""
        return (
            f"Stopped: the agent reached its budget{given}, which it counts over its whole "
            f"session; this task cost {dollars(runtime.cost.usd)}."
        )
