"""What each turn cost, who it is counted to, and the budgets that stop a turn.

Costs change for reasons of their own (an agent's way of reporting usage, a new
budget): an agent reports a turn's cost itself, or only its session's running total
(ACP `usage_update`), which this module turns into the turn's share. The bridge's pump
asks here when a turn ends or reports usage; what it then does with a crossed budget is
its own business. A turn is what `LiveTurn` says: cost knows nothing of the bridge.

This is where an agent's figures enter tailagent's books, so this is where a figure
that is no cost (NaN, an infinity, a negative or absurd amount: `figures.usd_figure`)
is refused: logged once per turn, counted on /metrics, never kept.

Budgets hold for a person's turns together: what each running turn has reported so far
is kept in the store (`Usage.running`), so a person's spent-plus-running is what a new
task is admitted against and what stops their running turns at their next report, on
every server that shares the store. What a turn was admitted against is its
reservation (reserves.py): it shrinks as the turn reports, and goes once its cost is
counted, or once it ends with none.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Protocol

from tailagent.agents.events import AgentSession, TurnDone, UsageUpdated
from tailagent.cost.budgets import Spending
from tailagent.cost.figures import MAX_SESSION_USD, MAX_TURN_USD, dollars, token_figure, usd_figure
from tailagent.cost.ledger import Cost
from tailagent.cost.reserves import Reservation
from tailagent.output.metrics import COSTS_REFUSED

# A turn's cost lines log as the executor, as they did when this was a part of it: log
# lines and an operator's filters on them stay as they were.
log = logging.getLogger(__name__)


class LiveTurn(Protocol):
    """What cost needs of a turn alive on this server (the bridge's `TaskRuntime` is
    one): whose it is, and what it has cost so far."""

    task_id: str
    context_id: str
    session: AgentSession
    owner: str  # the person its cost is counted to
    via: str  # the node a delegated turn came through ("" directly): its usage row says so
    cost: Cost  # the task's turns so far
    # The agent session's running cost (ACP `usage_update`) when this turn started, and
    # now: the turn's share is the difference.
    session_cost_before: float | None
    session_cost: float | None
    running_rows: bool  # its session's running-turn rows may be in the store
    conversation_new: bool  # its conversation began with it, and nothing is counted yet
    settled: bool  # its cost counted though it ended without a result
    cost_refused: bool  # a figure of its agent's was refused (logged once)
    reservation: Reservation | None  # what it holds of its person's budget until counted


def session_grew(turn: LiveTurn) -> float | None:
    """What the session's running cost grew by in this turn; None when the agent
    reported none. A smaller total than before: the agent counts from zero again."""
    if turn.session_cost is None:
        return None
    before = turn.session_cost_before or 0.0
    return turn.session_cost - before if turn.session_cost >= before else turn.session_cost


def refuse(turn: LiveTurn, figure: str, value: object) -> None:
    """Counts a figure that is no cost; says so in the log once per turn."""
    COSTS_REFUSED.labels(figure).inc()
    if not turn.cost_refused:
        turn.cost_refused = True
        shown = repr(value)
        shown = shown if len(shown) <= 40 else shown[:40] + "…"
        log.warning(
            "task %s: the agent reported a %s of %s, not a finite number within the "
            "bounds: refused, not counted (further ones of this turn are counted on "
            "/metrics only)",
            turn.task_id,
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


def checked_turn(event: TurnDone, turn: LiveTurn) -> TurnDone:
    """The end of a turn with only the figures that are costs: its dollars when they
    are a cost, its usage without a token count out of bounds or a number that is not
    finite (at any depth, as a task's metadata must keep it)."""
    cost = event.cost
    if cost is not None and (cost := usd_figure(event.cost)) is None:
        refuse(turn, "turn cost", event.cost)
    usage = _finite(event.usage, turn)
    for name in (n for names in TOKEN_NAMES.values() for n in names):
        if name in usage and token_figure(usage[name]) is None:
            refuse(turn, "token count", usage.pop(name))
    return dataclasses.replace(event, cost=cost, usage=usage)


def _finite(usage: Any, turn: LiveTurn) -> Any:
    if isinstance(usage, dict):
        kept = {k: _finite(v, turn) for k, v in usage.items()}
        return {k: v for k, v in kept.items() if v is not _DROPPED}
    if isinstance(usage, list):
        return [v for v in (_finite(v, turn) for v in usage) if v is not _DROPPED]
    if (isinstance(usage, float) and not math.isfinite(usage)) or (
        isinstance(usage, int) and not isinstance(usage, bool) and abs(usage) > 2**53
    ):
        refuse(turn, "usage figure", usage)
        return _DROPPED
    return usage


def turn_cost(event: TurnDone, turn: LiveTurn) -> Cost:
    """What a `checked_turn` cost: the agent's own figure, else what the session's
    running cost grew by during the turn; its tokens from the turn's usage."""
    usd = event.cost if event.cost is not None else session_grew(turn)
    tokens = {
        kind: sum(token_figure(event.usage.get(n)) or 0 for n in names)
        for kind, names in TOKEN_NAMES.items()
    }
    return Cost(usd or 0.0, tokens["input"], tokens["output"])


class TurnCosts:
    """The turns' side of the books: each turn's cost counted to its person, a turn
    that ends without a result settled, and the budgets a running turn crosses."""

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

    async def count(self, turn: LiveTurn, cost: Cost) -> dict[str, Any]:
        """Keeps a turn's cost with its person and task; the task's and its
        conversation's costs, for the task's metadata."""
        turn.cost = turn.cost + cost
        if self._spending is None:
            if turn.session_cost is not None:
                self._session_costs[turn.session.session_id] = turn.session_cost
            return {"cost": turn.cost.as_json()}
        try:
            # Its session's running-turn rows go as it is counted, when there may be any.
            clears = turn.session.session_id if turn.running_rows else ""
            first, turn.conversation_new = turn.conversation_new, False
            total = await self._spending.record(
                turn.owner, turn.context_id, cost, clears, turn.via, first=first
            )
            if turn.session_cost is not None:
                await self._spending.usage.set_session_cost(
                    turn.session.session_id, turn.session_cost
                )
        except Exception:
            log.exception("task %s: keeping the turn's cost", turn.task_id)
            if turn.reservation is not None:  # it stays, in the uncounted cost's place
                turn.reservation.settled = True
            return {"cost": turn.cost.as_json()}
        await self.release(turn)
        return {"cost": turn.cost.as_json(), "conversationCost": total.as_json()}

    async def settle(self, turn: LiveTurn) -> None:
        """Counts what a turn that ends without a result (failed, cancelled) had cost
        by its agent's last report, so neither the person's day nor the session's next
        turn is left to guess it."""
        if turn.session_cost is not None and not turn.settled:
            turn.settled = True
            await self.count(turn, turn_cost(TurnDone(), turn))
        else:
            await self.release(turn)

    async def release(self, turn: LiveTurn) -> None:
        """Gives back what the turn held of its person's budget: its cost is counted,
        or it ended with none known. A store that fails it leaves the row to this
        server's next start (reserves.py), holding the budget until then."""
        await self.give_back(turn.reservation, turn.task_id)

    async def give_back(self, reservation: Reservation | None, task_id: str = "") -> None:
        """Gives a reservation back (once; a failure is logged: see `release`)."""
        if self._spending is None or reservation is None:
            return
        try:
            await self._spending.reserves.release(reservation)
        except Exception:
            log.exception("task %s: releasing its reservation", task_id or "(not started)")

    def running_total(self, turn: LiveTurn, event: UsageUpdated) -> bool:
        """Takes the session's running total an agent reported; False when it is no
        cost (refused, the turn's figures unchanged)."""
        total = usd_figure(event.cost_usd, MAX_SESSION_USD)
        grew = None if total is None else total - (turn.session_cost_before or 0.0)
        if total is None or (grew is not None and grew > MAX_TURN_USD):
            refuse(turn, "session's running cost", event.cost_usd)
            return False
        turn.session_cost = total
        return True

    async def crossed(self, turn: LiveTurn, event: UsageUpdated) -> str | None:
        """Why the turn stops now that its session's running cost is `event.cost_usd`
        (a budget it, or its person's turns together, crossed); None while it is within
        them."""
        if not self.running_total(turn, event) or self._spending is None:
            return None
        grew = session_grew(turn) or 0.0
        task_limit = self._spending.budgets.per_task_usd
        if task_limit is not None and turn.cost.usd + grew >= task_limit:
            return self._budget_stop_text(turn.cost.usd + grew)
        turn.running_rows = True
        try:
            await self._spending.usage.running(
                turn.task_id, turn.session.session_id, turn.owner, grew
            )
            if turn.reservation is not None:
                await self._spending.reserves.leave(turn.reservation, turn.reservation.usd - grew)
        except Exception:
            log.exception("task %s: keeping what the turn has cost so far", turn.task_id)
        budget = await self._spending.daily_budget(turn.owner)
        if budget is None:
            return None
        spent = await self._spending.usage.spent(turn.owner)
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

    def agent_budget_text(self, turn: LiveTurn) -> str:
        """Why the agent ended a turn at its own budget (Claude Code's `max_budget_usd`,
        which it counts over its whole session, not one task)."""
        limit = self._spending.budgets.per_task_usd if self._spending else None
        given = f" of {dollars(limit)} (budgets.per_task_usd)" if limit is not None else ""
        return (
            f"Stopped: the agent reached its budget{given}, which it counts over its whole "
            f"session; this task cost {dollars(turn.cost.usd)}."
        )
