"""What each turn cost, who it is counted to, and the budgets that stop a turn.

Costs change for reasons of their own (an agent's way of reporting usage, a new
budget): an agent reports a turn's cost itself, or only its session's running total
(ACP `usage_update`), which this module turns into the turn's share. The pump asks
here when a turn ends or reports usage; what it then does with a crossed budget is its
own business.
"""

from __future__ import annotations

from typing import Any

from tailagent.agents.events import TurnDone, UsageUpdated
from tailagent.bridge.runtime import TaskRuntime, log
from tailagent.bridge.usage import Cost, Spending
from tailagent.costs import dollars

# Agent sessions whose last running cost is remembered (a forgotten one's next turn
# counts its whole running total).
MAX_SESSION_COSTS = 10_000


def turn_cost(event: TurnDone, runtime: TaskRuntime) -> Cost:
    """What a turn cost: the agent's own figure, else what the session's running cost
    grew by during the turn; its tokens from the turn's usage."""
    usd = event.cost if event.cost is not None else runtime.session_grew()
    usage = event.usage
    return Cost(usd or 0.0, _tokens(usage, "input"), _tokens(usage, "output"))


def _tokens(usage: dict[str, Any], kind: str) -> int:
    """Tokens of one kind in an agent's usage figures (camelCase or snake_case; cached
    input counts as input)."""
    names: tuple[str, ...] = (f"{kind}Tokens", f"{kind}_tokens")
    if kind == "input":
        names += ("cacheReadInputTokens", "cache_read_input_tokens",
                  "cacheCreationInputTokens", "cache_creation_input_tokens")  # fmt: skip
    return sum(int(v) for n in names if isinstance(v := usage.get(n), int | float))


class TurnCosts:
    def __init__(self, spending: Spending | None) -> None:
        self._spending = spending
        # Each agent session's last running cost (ACP `usage_update`), by session id.
        self._session_costs: dict[str, float] = {}

    def session_cost(self, session_id: str) -> float | None:
        """The agent session's running cost when its last turn here ended."""
        return self._session_costs.get(session_id)

    async def count(self, runtime: TaskRuntime, cost: Cost) -> dict[str, Any]:
        """Keeps a turn's cost with its person and task; the task's and its
        conversation's costs, for the task's metadata."""
        runtime.cost = runtime.cost + cost
        if runtime.session_cost is not None:
            self._session_costs[runtime.session.session_id] = runtime.session_cost
            if len(self._session_costs) > MAX_SESSION_COSTS:  # the oldest sessions go
                for stale in list(self._session_costs)[: MAX_SESSION_COSTS // 2]:
                    del self._session_costs[stale]
        if self._spending is None:
            return {"cost": runtime.cost.as_json()}
        try:
            total = await self._spending.record(runtime.owner, runtime.context_id, cost)
        except Exception:
            log.exception("task %s: keeping the turn's cost", runtime.task_id)
            return {"cost": runtime.cost.as_json()}
        return {"cost": runtime.cost.as_json(), "conversationCost": total.as_json()}

    async def crossed(self, runtime: TaskRuntime, event: UsageUpdated) -> str | None:
        """Why the turn stops now that its session's running cost is `event.cost_usd`
        (a budget it crossed); None while it is within them."""
        assert event.cost_usd is not None
        if runtime.session_cost_before is None and runtime.session_cost is None:
            runtime.session_cost_before = self._session_costs.get(runtime.session.session_id)
        runtime.session_cost = event.cost_usd
        if self._spending is None:
            return None
        grew = runtime.session_grew() or 0.0
        task_limit = self._spending.budgets.per_task_usd
        if task_limit is not None and runtime.cost.usd + grew >= task_limit:
            return self._budget_stop_text(runtime.cost.usd + grew)
        budget = await self._spending.daily_budget(runtime.owner)
        if budget is None:
            return None
        spent = await self._spending.usage.spent(runtime.owner) + grew
        if spent < budget[0]:
            return None
        which = "their own daily budget" if budget[1] else "budgets.per_caller_daily_usd"
        return (
            f"Stopped: {dollars(spent)} spent today reached the daily budget of "
            f"{dollars(budget[0])} ({which})."
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
