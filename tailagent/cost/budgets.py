"""What a person may spend: their day's budget, checked before a turn starts, and each
turn's cost, kept when it ends.

A person's own daily budget (`tailagent budget set`, kept in the ledger's
`caller_budgets`) wins over `budgets.per_caller_daily_usd`; either holds for the UTC
day, the same day for every server sharing a store, and counts what the person's turns
handed to other boxes with their own (a refusal says how much of it that was). The rows
themselves are ledger.py's; a running turn's stop at a budget is turns.py's.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tailagent.config import BudgetSettings
from tailagent.cost.figures import dollars
from tailagent.cost.ledger import Cost, Usage, person_of
from tailagent.output.metrics import COST_USD, TOKENS, caller_label


def resets_at() -> str:
    """When today's budgets start again: the next UTC midnight."""
    tomorrow = datetime.now(UTC).date() + timedelta(days=1)
    return f"{tomorrow.isoformat()} 00:00 UTC"


class Spending:
    """The budgets, checked before a turn starts, and each turn's cost, kept when it ends."""

    def __init__(self, usage: Usage, budgets: BudgetSettings) -> None:
        self.usage = usage
        self.budgets = budgets

    async def daily_budget(self, owner: str) -> tuple[float, bool] | None:
        """The person's budget for a day and whether it is their own; None: no limit."""
        own = await self.usage.budget_of(owner)
        if own is not None:
            return own, True
        configured = self.budgets.per_caller_daily_usd
        return None if configured is None else (configured, False)

    async def refusal(self, owner: str) -> str | None:
        """Why the person may not start a turn now (their day's budget is spent); None
        when they may."""
        budget = await self.daily_budget(owner)
        if budget is None:
            return None
        spent = await self.usage.spent(owner)
        if spent < budget[0]:
            return None
        delegated = await self.usage.delegated(owner)
        return over_budget_text(person_of(owner), budget[0], spent, budget[1], delegated)

    async def record(
        self,
        owner: str,
        context_id: str,
        cost: Cost,
        session_id: str = "",
        via: str = "",
        *,
        first: bool = False,
    ) -> Cost:
        """Keeps a turn's cost (`via`: the node a delegated turn came through); returns
        what its conversation cost so far: this cost, when it is the `first` counted in
        its conversation."""
        label = caller_label(person_of(owner))
        COST_USD.labels(label).inc(cost.usd)
        TOKENS.labels(label, "input").inc(cost.input_tokens)
        TOKENS.labels(label, "output").inc(cost.output_tokens)
        await self.usage.add(owner, context_id, cost, session_id, via)
        return cost if first else await self.usage.conversation(context_id)


def over_budget_text(
    who: str, budget: float, spent: float, own: bool, delegated: float = 0.0
) -> str:
    """The refusal of a turn to a person past their day's budget: which budget, what was
    spent (and how much of it other boxes did), and when it starts again."""
    which = "their own daily budget" if own else "budgets.per_caller_daily_usd"
    handed = f", {dollars(delegated)} of it on work handed to other boxes" if delegated else ""
    return (
        f"{who} has spent {dollars(spent)} of {dollars(budget)} today ({which}){handed}: no "
        f"new task until it resets at {resets_at()} (midnight UTC)"
    )
