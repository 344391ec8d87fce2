"""The nonces of actor-chain hops already accepted, kept in the store for their window.

A delegated request's last hop carries a nonce, and is good for `window` seconds of the
receiving box's clock either way (delegation/chain.py). Kept in memory, a captured
request was good again on a box that restarted within that time, and on every other
server of a shared PostgreSQL store. So each nonce is written here on its first use, by
a statement only that first use wins (two servers at once cannot both), and forgotten
once its hop would be refused by its time anyway.

Bounded, as the memory of one server was: when `limit` nonces are live, a new one is
refused (fail closed) rather than an old one forgotten that could then be replayed. Only
a node B lets hand work in, signing with its own pinned key, can add one.

The table is made on the first delegated request (most servers never see one).
"""

from __future__ import annotations

import math
import secrets

from tailagent.store.database import Database, LazyTable

_CREATE = (
    "CREATE TABLE IF NOT EXISTS delegation_nonces ("
    " nonce TEXT PRIMARY KEY, expires_ms BIGINT NOT NULL, claim TEXT NOT NULL)"
)
# Each use forgets the expired first: by this index, not a scan of every live nonce.
_INDEX = "CREATE INDEX IF NOT EXISTS delegation_nonces_expiry ON delegation_nonces (expires_ms)"
# Only the first use inserts, and only while fewer than :l are kept: its row comes back,
# a replay's or a full table's does not. One statement for a request on the happy path
# (a statement is a round trip of ~2 ms to a shared PostgreSQL: five of them were ~10 ms
# of every carried request, bench/bench_cluster.py).
_CLAIM = (
    "INSERT INTO delegation_nonces (nonce, expires_ms, claim)"
    " SELECT :n, :e, :c WHERE (SELECT COUNT(*) FROM"
    " (SELECT 1 FROM delegation_nonces LIMIT :l) AS live) < :l"
    " ON CONFLICT (nonce) DO NOTHING RETURNING nonce"
)
# A hand-off is one per agent turn, seconds apart: 10,000 within twice a minute's window
# is far past any real use, and counting that many live nonces stays about 1 ms on SQLite
# (100,000, the bound of the memory kept before, took 9 ms a request, on the event loop).
LIMIT = 10_000


class NoncesFull(Exception):
    """As many nonces are live as the store keeps; str() says so, and to retry."""


class HopNonces:
    """chain.Nonces in the store: `use(nonce, now)` is True on a nonce's first use only,
    on any server of the store, before or after a restart."""

    def __init__(self, database: Database, window: float, limit: int = LIMIT) -> None:
        # A hop is good while its time is within the window either way of this clock.
        self.keep = 2 * window
        self.limit = limit
        self._table = LazyTable(database, _CREATE, _INDEX)

    async def use(self, nonce: str, now: float) -> bool:
        """Records `nonce`; False when it was used within the window (a replay).
        NoncesFull when `limit` others are live."""
        db = await self._table.ready()
        row = {"n": nonce, "e": math.ceil((now + self.keep) * 1000),
               "c": secrets.token_hex(8), "l": self.limit}  # fmt: skip
        if await db.change(_CLAIM, row):
            return True
        # A replay, or a table full of nonces some of which are past their time: those
        # go (a hop that old is refused by its time anyway), and the claim is tried again.
        expired = {"t": math.floor(now * 1000)}
        await db.execute("DELETE FROM delegation_nonces WHERE expires_ms <= :t", expired)
        if await db.change(_CLAIM, row):
            return True
        if await db.fetch("SELECT 1 FROM delegation_nonces WHERE nonce = :n", {"n": nonce}):
            return False
        raise NoncesFull(
            f"more than {self.limit} delegated requests within {self.keep:g} s; try again shortly"
        )
