"""What a person's turns may still cost, held against their day's budget from the
moment a turn is admitted until it reports what it did cost.

Issue 42 counted a running turn only as it reported: four turns started at once against
$1, each reporting $0.90 at its end, were all admitted (nothing was spent yet) and the
day ended at $3.60. So admission reserves the turn's figure first, in the store beside
the ledger's rows (`turn_reserved`), and admits only while the person's spent + running
+ reserved is below the budget: the check and the reservation are one statement, under
a lock on the person where servers share a PostgreSQL store, so two servers admitting at
once see each other's reservation. What the figure is, and why, is budgets.py's.

A reservation shrinks as its turn reports a running cost (what it has reported is
counted as running, the rest of its figure stays reserved), and goes when its cost is
counted: after the cost is added, so a budget read between the two counts the turn
twice, never not at all.

A reservation is released, not left to expire: a turn alive on a server holds it for as
long as it runs (a turn waiting for an answer may wait for days, so no age is too old
for a live one), and a server that starts again runs no turn of its previous life, so at
its start it drops every reservation its previous run held (`server` names it, as it
names its tasks in a shared store). One another server left when it died for good
counts only on its own UTC day, the day its budget resets.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from tailagent.cost.ledger import USD_SUM, today
from tailagent.store.database import Database, EngineDatabase, Params

# Keyed by reservation: the turn that holds it is not yet a task when it is admitted.
_CREATE = (
    "CREATE TABLE IF NOT EXISTS turn_reserved ("
    " id TEXT PRIMARY KEY, owner TEXT NOT NULL, day TEXT NOT NULL, usd {real} NOT NULL,"
    " server TEXT NOT NULL, at TEXT NOT NULL)"
)
_INDEX = "CREATE INDEX IF NOT EXISTS ix_turn_reserved_owner ON turn_reserved (owner, day)"
# What a person's day holds: spent, running, handed to other boxes, and reserved.
_HELD = " + ".join(
    f"(SELECT {USD_SUM} FROM {table} WHERE owner = :o AND day = :d)"
    for table in ("caller_usage", "turn_running", "delegated_costs", "turn_reserved")
)
_DOLLARS = "CAST(:{} AS DOUBLE PRECISION)"
# The reservation, made only while what the day holds is below the budget (`{usd}`: the
# figure, or what is left of the budget).
_RESERVE = (
    "INSERT INTO turn_reserved (id, owner, day, usd, server, at)"
    " SELECT CAST(:id AS TEXT), CAST(:o AS TEXT), CAST(:d AS TEXT), {usd}, CAST(:s AS TEXT),"
    f" CAST(:t AS TEXT) FROM (SELECT {_HELD} AS total) AS held"
    f" WHERE held.total < {_DOLLARS.format('b')}"
)
FIGURE = _DOLLARS.format("u")
REST = f"{_DOLLARS.format('b')} - held.total"
# Where servers share a PostgreSQL store, one person's admissions take turns: the lock
# is held until the reservation commits, and the next one's statement starts after it.
_LOCK = "SELECT pg_advisory_xact_lock(hashtext(CAST(:k AS TEXT)))"


@dataclass(eq=False)
class Reservation:
    """One admitted turn's hold on its person's budget. `taken`: a turn holds it (a
    request that fails before must give it back, one after must not); `settled`: it is
    no longer to be given back (its row is gone, or left to hold the budget in the place
    of a cost the store failed to count, until this server's next start)."""

    id: str
    owner: str
    usd: float
    taken: bool = False
    settled: bool = False


class Reserves:
    """The store's reservations (see the module's note)."""

    def __init__(self, database: Database, server: str) -> None:
        self._db = database
        self._server = server

    async def initialize(self) -> None:
        """Makes the table; drops the reservations of past days and of this server's
        previous run, whose turns died with it."""
        real = "DOUBLE PRECISION" if self._db.postgres else "REAL"
        await self._db.execute(_CREATE.format(real=real))
        await self._db.execute(_INDEX)
        await self._db.execute(
            "DELETE FROM turn_reserved WHERE day < :d OR server = :s",
            {"d": today(), "s": self._server},
        )

    async def reserve(self, owner: str, budget: float, usd: float | None) -> Reservation | None:
        """Reserves `usd` (None: what is left of the budget) for a turn of the person's,
        if what their day holds is below `budget`; None when it is not."""
        made = uuid.uuid4().hex
        params = {
            "id": made, "o": owner, "d": today(), "u": usd or 0.0, "b": budget,
            "s": self._server, "t": datetime.now(UTC).isoformat(),
        }  # fmt: skip
        await self._alone(owner, _RESERVE.format(usd=REST if usd is None else FIGURE), params)
        rows = await self._db.fetch("SELECT usd FROM turn_reserved WHERE id = :i", {"i": made})
        return Reservation(made, owner, float(rows[0][0])) if rows else None

    async def _alone(self, owner: str, sql: str, params: Params) -> None:
        """Runs the reservation while no other server reserves for the person: SQLite
        has one writer and runs a statement whole; PostgreSQL takes a lock first."""
        if not isinstance(self._db, EngineDatabase):
            await self._db.execute(sql, params)
            return
        from sqlalchemy import text  # loaded already: the engine is SQLAlchemy's

        async with self._db.engine.begin() as conn:
            await conn.execute(text(_LOCK), {"k": "tailagent budget " + owner})
            await conn.execute(text(sql), dict(params))

    async def leave(self, reservation: Reservation, left: float) -> None:
        """What of the reservation is still reserved, now that its turn reported it has
        cost the rest (kept as running)."""
        if not reservation.settled:
            await self._db.execute(
                "UPDATE turn_reserved SET usd = :u WHERE id = :i",
                {"u": max(0.0, left), "i": reservation.id},
            )

    async def release(self, reservation: Reservation) -> None:
        """Gives the reservation back (its turn's cost counted, or no turn ran)."""
        if not reservation.settled:
            reservation.settled = True
            await self._db.execute("DELETE FROM turn_reserved WHERE id = :i", {"i": reservation.id})

    async def held(self, owner: str) -> float:
        """What the person's admitted turns hold reserved today."""
        rows = await self._db.fetch(
            f"SELECT {USD_SUM} FROM turn_reserved WHERE owner = :o AND day = :d",
            {"o": owner, "d": today()},
        )
        return float(rows[0][0])
