"""What a person may spend: their day's budget, held before a turn starts, and each
turn's cost, kept when it ends.

A person's own daily budget (`tailagent budget set`, kept in the ledger's
`caller_budgets`) wins over `budgets.per_caller_daily_usd`; either holds for the UTC
day, the same day for every server sharing a store, and counts what the person's turns
handed to other boxes with their own (a refusal says how much of it that was). The rows
themselves are ledger.py's; a running turn's stop at a budget is turns.py's.

A turn is admitted only while the person's spent + running + reserved is below their
budget, and admitting it reserves what it may cost (reserves.py) until it reports. The
figure reserved (`reserve_figure`):
- `budgets.per_task_usd` where it is set: it is a cap tailagent holds the turn to
  (stopped at it, or Claude Code's own `max_budget_usd`), so the reservation bounds the
  turn and the day ends at most one reserve over the budget;
- else `budgets.reserve_usd`, a figure the operator chose to let a person's turns run
  side by side; it is not a cap, so a turn dearer than it passes it by the difference;
- else what is left of the day's budget: a person without a cap runs one turn at a time
  against it, and the day ends at most that turn over.
Not a figure from the person's recent turns: the person the budget holds would set it,
running cheap turns to lower it and then four dear ones at once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tailagent.config import BudgetSettings
from tailagent.cost.figures import dollars
from tailagent.cost.ledger import Cost, Usage, person_of
from tailagent.cost.reserves import Reservation, Reserves
from tailagent.output.metrics import COST_USD, TOKENS, caller_label


def resets_at() -> str:
    """When today's budgets start again: the next UTC midnight."""
    tomorrow = datetime.now(UTC).date() + timedelta(days=1)
    return f"{tomorrow.isoformat()} 00:00 UTC"


class OverBudget(Exception):
    """A new turn refused at its person's day's budget; str() says why and until when."""


class Spending:
    """The budgets, held before a turn starts, and each turn's cost, kept when it ends."""

    def __init__(self, usage: Usage, budgets: BudgetSettings, reserves: Reserves) -> None:
        self.usage = usage
        self.budgets = budgets
        self.reserves = reserves

    async def daily_budget(self, owner: str) -> tuple[float, bool] | None:
        """The person's budget for a day and whether it is their own; None: no limit."""
        own = await self.usage.budget_of(owner)
        if own is not None:
            return own, True
        configured = self.budgets.per_caller_daily_usd
        return None if configured is None else (configured, False)

    def reserve_figure(self) -> tuple[float | None, str]:
        """What a turn reserves (None: the rest of the budget) and where it comes from
        (see the module's note for why)."""
        if self.budgets.per_task_usd is not None:
            return self.budgets.per_task_usd, "budgets.per_task_usd"
        if self.budgets.reserve_usd is not None:
            return self.budgets.reserve_usd, "budgets.reserve_usd"
        return None, "what is left of the budget: no budgets.per_task_usd or reserve_usd is set"

    async def admit(self, owner: str) -> Reservation | None:
        """Reserves what a new turn of the person's may cost; None when no budget holds
        them. Raises OverBudget when what their day holds (spent, running, reserved)
        reached their budget."""
        budget = await self.daily_budget(owner)
        if budget is None:
            return None
        figure, source = self.reserve_figure()
        reservation = await self.reserves.reserve(owner, budget[0], figure)
        if reservation is not None:
            return reservation
        spent = await self.usage.spent(owner)
        delegated = await self.usage.delegated(owner)
        held = await self.reserves.held(owner)
        raise OverBudget(
            over_budget_text(person_of(owner), budget[0], spent, budget[1], delegated)
            if not held
            else reserved_text(person_of(owner), budget[0], spent, budget[1], held, source)
        )

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


def reserved_text(
    who: str, budget: float, spent: float, own: bool, held: float, source: str
) -> str:
    """The refusal of a turn while the person's running turns hold the rest of their
    budget reserved: what was spent, what is held and by which figure, and when a turn
    may start again."""
    which = "their own daily budget" if own else "budgets.per_caller_daily_usd"
    return (
        f"{who} has spent {dollars(spent)} of {dollars(budget)} today ({which}), and their "
        f"running turns hold {dollars(held)} more of it until they report what they cost "
        f"(each reserves {source}): no new task until one of them ends, or until the "
        f"budget resets at {resets_at()} (midnight UTC)"
    )
