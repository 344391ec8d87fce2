"""The books: what each person's work cost, kept in rows of the store.

Teams share one box and one agent account; the agent reports what a turn cost, and
only tailagent knows who asked for it. Each turn's cost is added to one row per
person, UTC day and conversation (`caller_usage`), kept in the store beside the tasks:
it outlives a restart, every server sharing a PostgreSQL store adds to the same rows,
and `tailagent usage` reads it without a server. A person's day is the sum of their
rows for that day (what a budget is checked against); a conversation's cost is the sum
of its rows.

A turn that came through another box's actor chain is counted to its person as any
other, its row naming the node it came through (`via`): `tailagent usage` shows
"alice@example.com via devbox-1". What this box's turns handed to another box cost
there is the person's too, but kept apart (`delegated_costs`): the other box counts it
in its own books, so `usage` shows it in a column of its own, never in the person's own
cost (the two boxes' books never count a dollar twice), while their day here, what a
budget is checked against, is both.

A person's own daily budget, set by the box's owner (`tailagent budget set`), is a row
here too (`caller_budgets`); what a budget allows and refuses is budgets.py's.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from tailagent.cost.figures import MAX_SESSION_USD, usd_figure
from tailagent.output.metrics import COSTS_REFUSED
from tailagent.store.database import Database

log = logging.getLogger(__name__)

_CREATE_USAGE = (
    "CREATE TABLE IF NOT EXISTS caller_usage ("
    " owner TEXT NOT NULL, day TEXT NOT NULL, context_id TEXT NOT NULL,"
    " usd {real} NOT NULL, input_tokens BIGINT NOT NULL, output_tokens BIGINT NOT NULL,"
    " turns BIGINT NOT NULL, via TEXT NOT NULL DEFAULT '', PRIMARY KEY (owner, day, context_id))"
)
# A turn's end reads its conversation's cost (`conversation`): without this index that
# read went through every row of every person's days, 0.03 ms at 1,000 conversations
# and 0.65 ms at 10,000, on every turn.
_INDEX_USAGE_BY_CONVERSATION = (
    "CREATE INDEX IF NOT EXISTS ix_caller_usage_context_id ON caller_usage (context_id)"
)
# One row per task of this box and the peer's task it handed work to: the peer's figure
# for that task is its whole cost so far, so a report again (a retry, a follow-up turn of
# the same peer task) replaces the row's figure, never adds to it; a smaller one (a late
# retry) never lowers it.
_CREATE_DELEGATED = (
    "CREATE TABLE IF NOT EXISTS delegated_costs ("
    " task_id TEXT NOT NULL, peer TEXT NOT NULL, peer_task_id TEXT NOT NULL,"
    " owner TEXT NOT NULL, day TEXT NOT NULL, context_id TEXT NOT NULL, usd {real} NOT NULL,"
    " PRIMARY KEY (task_id, peer, peer_task_id))"
)
_ADD_DELEGATED = (
    "INSERT INTO delegated_costs (task_id, peer, peer_task_id, owner, day, context_id, usd)"
    " VALUES (:t, :p, :pt, :o, :d, :c, :u) ON CONFLICT (task_id, peer, peer_task_id)"
    " DO UPDATE SET usd = CASE WHEN excluded.usd > delegated_costs.usd"
    " THEN excluded.usd ELSE delegated_costs.usd END"
)
_CREATE_BUDGETS = (
    "CREATE TABLE IF NOT EXISTS caller_budgets ("
    " owner TEXT PRIMARY KEY, daily_usd {real} NOT NULL, set_at TEXT NOT NULL)"
)
_ADD = (
    "INSERT INTO caller_usage"
    " (owner, day, context_id, usd, input_tokens, output_tokens, turns, via)"
    " VALUES (:o, :d, :c, :u, :i, :x, 1, :v) ON CONFLICT (owner, day, context_id) DO UPDATE SET"
    " usd = caller_usage.usd + excluded.usd,"
    " input_tokens = caller_usage.input_tokens + excluded.input_tokens,"
    " output_tokens = caller_usage.output_tokens + excluded.output_tokens,"
    " turns = caller_usage.turns + 1"
)
# Rows are summed through the bounds a figure had to meet to be kept, so a figure stored
# before they held (an infinity, a negative) cannot make a sum that breaks a page, a JSON
# line or a person's budget: such a row counts as nothing.
_USD = "CASE WHEN usd >= 0 AND usd <= 1e15 THEN usd ELSE 0 END"
_TOKENS = "CASE WHEN {0} >= 0 AND {0} <= 1e15 THEN {0} ELSE 0 END"
# A column of dollars summed so (reserves.py sums its own rows the same way).
USD_SUM = f"COALESCE(SUM({_USD}), 0)"
_SUMS = (
    f"COALESCE(SUM({_USD}), 0), COALESCE(SUM({_TOKENS.format('input_tokens')}), 0),"
    f" COALESCE(SUM({_TOKENS.format('output_tokens')}), 0)"
)
# What each running turn has reported so far and not yet counted (a turn's share of its
# session's running total), by task: a person's running turns count against their
# budget before they end, on every server that shares the store. A row goes when a turn
# of its agent session is counted: its own, or, for a turn a killed server left, the
# session's next, which is charged what the session grew by since (that turn's share
# too). One left with no next turn counts only on its own UTC day.
_CREATE_RUNNING = (
    "CREATE TABLE IF NOT EXISTS turn_running ("
    " task_id TEXT PRIMARY KEY, session_id TEXT NOT NULL, owner TEXT NOT NULL,"
    " day TEXT NOT NULL, usd {real} NOT NULL)"
)
_SET_RUNNING = (
    "INSERT INTO turn_running (task_id, session_id, owner, day, usd)"
    " VALUES (:t, :s, :o, :d, :u)"
    " ON CONFLICT (task_id) DO UPDATE SET usd = excluded.usd, day = excluded.day"
)
# Each agent session's running total when its last turn was counted (ACP `usage_update`
# reports the session's total, not a turn's): kept so a turn after a restart is charged
# what the total grew by, not the whole of it again.
_CREATE_SESSIONS = (
    "CREATE TABLE IF NOT EXISTS session_costs ("
    " session_id TEXT PRIMARY KEY, usd {real} NOT NULL, at TEXT NOT NULL)"
)
_SET_SESSION = (
    "INSERT INTO session_costs (session_id, usd, at) VALUES (:s, :u, :t)"
    " ON CONFLICT (session_id) DO UPDATE SET usd = excluded.usd, at = excluded.at"
)
# A session not counted for this long is forgotten (its agent long gone).
SESSION_COSTS_KEPT = timedelta(days=30)
_SET_BUDGET = (
    "INSERT INTO caller_budgets (owner, daily_usd, set_at) VALUES (:o, :u, :t)"
    " ON CONFLICT (owner) DO UPDATE SET daily_usd = excluded.daily_usd, set_at = excluded.set_at"
)
# The kinds of caller an owner name starts with (access/identity.py's `Caller.owner`).
OWNER_KINDS = ("user:", "tags:", "token:", "local:")


@dataclass(frozen=True, slots=True)
class Cost:
    """What some work cost: dollars as the agent reported them, and its tokens."""

    usd: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.usd + other.usd,
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
        )

    def as_json(self) -> dict[str, Any]:
        """As a task's metadata keeps it (A2A's camelCase keys)."""
        return {
            "usd": round(self.usd, 6),
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
        }


@dataclass(frozen=True, slots=True)
class DayUsage:
    """One person's spending on one UTC day, over all their conversations that came the
    same way (`via`: the node a delegated turn came through; "" directly), and what
    their turns here handed to other boxes cost there (`delegated`, not in `cost`)."""

    owner: str
    day: str
    cost: Cost
    turns: int
    conversations: int
    via: str = ""
    delegated: float = 0.0


def today() -> str:
    """Budgets run by the UTC day: the same day for every server sharing a store."""
    return datetime.now(UTC).date().isoformat()


def owner_named(name: str) -> str:
    """The owner name of a person as people write it: a login (`alice@example.com`), a
    tag (`tag:ci`), or the owner name itself (`token:ci`, `user:alice@example.com`)."""
    if name.startswith(OWNER_KINDS):
        return name
    if name.startswith("tag:"):
        return "tags:" + ",".join(sorted(name.split(",")))
    return "user:" + name


def person_of(owner: str) -> str:
    """How a person is shown: their login or tags (`token:` and `local:` stay named, so a
    token's name cannot pass for a login)."""
    for kind in ("user:", "tags:"):
        if owner.startswith(kind):
            return owner.removeprefix(kind)
    return owner


class Usage:
    """The ledger's tables in the store: each person's days and conversations, what
    running turns and agent sessions have reported, and each person's own budget."""

    def __init__(self, database: Database) -> None:
        self._db = database

    async def initialize(self) -> None:
        real = "DOUBLE PRECISION" if self._db.postgres else "REAL"
        await self._db.execute(_CREATE_USAGE.format(real=real))
        await self._db.execute(_INDEX_USAGE_BY_CONVERSATION)
        await self._db.execute(_CREATE_BUDGETS.format(real=real))
        await self._db.execute(_CREATE_RUNNING.format(real=real))
        await self._db.execute(_CREATE_SESSIONS.format(real=real))
        await self._db.execute(_CREATE_DELEGATED.format(real=real))
        if "via" not in await self._usage_columns():  # a store from before delegation
            await self._db.execute(
                "ALTER TABLE caller_usage ADD COLUMN via TEXT NOT NULL DEFAULT ''"
            )
        forgotten = (datetime.now(UTC) - SESSION_COSTS_KEPT).isoformat()
        await self._db.execute("DELETE FROM session_costs WHERE at < :t", {"t": forgotten})
        await self._db.execute("DELETE FROM turn_running WHERE day < :d", {"d": today()})

    async def _usage_columns(self) -> set[str]:
        if self._db.postgres:
            rows = await self._db.fetch(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_name = 'caller_usage'"
            )
        else:
            rows = await self._db.fetch("SELECT name FROM pragma_table_info('caller_usage')")
        return {str(row[0]) for row in rows}

    async def add(
        self, owner: str, context_id: str, cost: Cost, session_id: str = "", via: str = ""
    ) -> None:
        """Adds one turn's cost to its person's day and conversation, in one statement
        (two servers adding at once both count), then forgets what its session's turns
        reported while they ran (in that order: a budget read between the two counts it
        twice, never not at all). `via`: the node a delegated turn came through; a
        conversation keeps the way its first turn of the day came."""
        await self._db.execute(
            _ADD,
            {
                "o": owner,
                "d": today(),
                "c": context_id,
                "u": cost.usd,
                "i": cost.input_tokens,
                "x": cost.output_tokens,
                "v": via,
            },
        )
        if session_id:
            await self._db.execute(
                "DELETE FROM turn_running WHERE session_id = :s", {"s": session_id}
            )

    async def running(self, task_id: str, session_id: str, owner: str, usd: float) -> None:
        """What a running turn has cost so far, before it ends and is counted."""
        await self._db.execute(
            _SET_RUNNING, {"t": task_id, "s": session_id, "o": owner, "d": today(), "u": usd}
        )

    async def record_delegated(
        self,
        owner: str,
        context_id: str,
        task_id: str,
        peer: str,
        cost_usd: float,
        peer_task_id: str = "",
    ) -> None:
        """Keeps what the peer says its task (`peer_task_id`) for this box's task cost
        there, as the person's delegated cost today: their own figure is the peer's to
        count. Idempotent per (task, peer, peer task): the figure is the peer task's
        whole cost so far, so a report again replaces it, never adds. A figure that is no
        cost (the peer's word, from the network) is refused: logged, counted on /metrics,
        never kept."""
        if usd_figure(cost_usd, MAX_SESSION_USD) is None:
            COSTS_REFUSED.labels("delegated cost").inc()
            log.warning("task %s: %s reported a cost of %.40r, not a cost: not counted",
                        task_id, peer, cost_usd)  # fmt: skip
            return
        params = {"t": task_id, "p": peer, "pt": peer_task_id, "o": owner, "d": today(),
                  "c": context_id, "u": cost_usd}  # fmt: skip
        await self._db.execute(_ADD_DELEGATED, params)

    async def spent(self, owner: str, day: str | None = None) -> float:
        """What the person spent on that UTC day (today by default), with what their
        running turns have reported so far and what they handed to other boxes."""
        params = {"o": owner, "d": day or today()}
        rows = await self._db.fetch(
            f"SELECT COALESCE(SUM({_USD}), 0) FROM caller_usage WHERE owner = :o AND day = :d"
            f" UNION ALL SELECT COALESCE(SUM({_USD}), 0) FROM turn_running"
            " WHERE owner = :o AND day = :d"
            f" UNION ALL SELECT COALESCE(SUM({_USD}), 0) FROM delegated_costs"
            " WHERE owner = :o AND day = :d",
            params,
        )
        return sum(float(row[0]) for row in rows)

    async def delegated(self, owner: str, day: str | None = None) -> float:
        """What the person's turns here handed to other boxes cost there that UTC day."""
        rows = await self._db.fetch(
            f"SELECT COALESCE(SUM({_USD}), 0) FROM delegated_costs WHERE owner = :o AND day = :d",
            {"o": owner, "d": day or today()},
        )
        return float(rows[0][0])

    async def session_cost(self, session_id: str) -> float | None:
        """The agent session's running total when its last turn was counted."""
        rows = await self._db.fetch(
            "SELECT usd FROM session_costs WHERE session_id = :s", {"s": session_id}
        )
        return float(rows[0][0]) if rows else None

    async def set_session_cost(self, session_id: str, usd: float) -> None:
        await self._db.execute(
            _SET_SESSION, {"s": session_id, "u": usd, "t": datetime.now(UTC).isoformat()}
        )

    async def conversation(self, context_id: str) -> Cost:
        """What a conversation cost so far, over all its turns and days."""
        rows = await self._db.fetch(
            f"SELECT {_SUMS} FROM caller_usage WHERE context_id = :c", {"c": context_id}
        )
        usd, inputs, outputs = rows[0]
        return Cost(float(usd), int(inputs), int(outputs))

    async def days(self, since: date) -> list[DayUsage]:
        """Each person's spending per UTC day from `since` on (a row per way it came),
        oldest day first; their delegated cost on their direct row, which is there (at
        no cost of its own) when only delegated work cost anything that day."""
        params = {"s": since.isoformat()}
        rows = await self._db.fetch(
            f"SELECT owner, day, via, {_SUMS}, SUM(turns), COUNT(*) FROM caller_usage"
            " WHERE day >= :s GROUP BY owner, day, via",
            params,
        )
        found: dict[tuple[str, str, str], DayUsage] = {}
        for owner, day, via, usd, inputs, outputs, turns, count in rows:
            cost = Cost(float(usd), int(inputs), int(outputs))
            found[(owner, day, via)] = DayUsage(owner, day, cost, int(turns), int(count), via)
        handed = await self._db.fetch(
            f"SELECT owner, day, COALESCE(SUM({_USD}), 0) FROM delegated_costs"
            " WHERE day >= :s GROUP BY owner, day",
            params,
        )
        for owner, day, usd in handed:
            own = found.get((owner, day, ""), DayUsage(owner, day, Cost(), 0, 0))
            found[(owner, day, "")] = dataclasses.replace(own, delegated=float(usd))
        return [found[key] for key in sorted(found, key=lambda k: (k[1], k[0], k[2]))]

    async def budget_of(self, owner: str) -> float | None:
        """The person's own daily budget, when one was set for them."""
        rows = await self._db.fetch(
            "SELECT daily_usd FROM caller_budgets WHERE owner = :o", {"o": owner}
        )
        return float(rows[0][0]) if rows else None

    async def set_budget(self, owner: str, daily_usd: float | None) -> None:
        """Sets the person's own daily budget; None gives them the configured one again."""
        if daily_usd is None:
            await self._db.execute("DELETE FROM caller_budgets WHERE owner = :o", {"o": owner})
            return
        now = datetime.now(UTC).isoformat()
        await self._db.execute(_SET_BUDGET, {"o": owner, "u": daily_usd, "t": now})

    async def budgets(self) -> dict[str, float]:
        """Every person's own daily budget."""
        rows = await self._db.fetch("SELECT owner, daily_usd FROM caller_budgets ORDER BY owner")
        return {owner: float(usd) for owner, usd in rows}
