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
# Only the first use inserts: a later one leaves the row, and the claim, as they were.
_CLAIM = (
    "INSERT INTO delegation_nonces (nonce, expires_ms, claim) VALUES (:n, :e, :c)"
    " ON CONFLICT (nonce) DO NOTHING"
)
# A hand-off is one per agent turn, seconds apart: 10,000 within twice a minute's window
# is far past any real use, and counting that many live nonces stays about 1 ms on SQLite
# (100,000, the bound of the memory kept before, took 9 ms a request, on the event loop).
LIMIT = 10_000
# Counting stops at the limit: the answer needed is only "full or not".
_LIVE = "SELECT COUNT(*) FROM (SELECT 1 FROM delegation_nonces LIMIT :l) AS live"


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
        now_ms = math.floor(now * 1000)
        await db.execute("DELETE FROM delegation_nonces WHERE expires_ms <= :t", {"t": now_ms})
        seen = "SELECT claim FROM delegation_nonces WHERE nonce = :n"
        if await db.fetch(seen, {"n": nonce}):
            return False
        ((live,),) = await db.fetch(_LIVE, {"l": self.limit})
        if live >= self.limit:
            raise NoncesFull(
                f"more than {self.limit} delegated requests within {self.keep:g} s; "
                "try again shortly"
            )
        claim = secrets.token_hex(8)
        expires = math.ceil((now + self.keep) * 1000)
        await db.execute(_CLAIM, {"n": nonce, "e": expires, "c": claim})
        rows = await db.fetch(seen, {"n": nonce})
        return bool(rows) and rows[0][0] == claim
