"""The notification answers already used, kept in the store until their tokens expire.

A notification's Allow or Deny carries a one-use token (webpush/actions.py). Kept in
memory only, a spent token was good again after a restart, for the rest of its day. So
each is written here on its first use, by a statement only that first use wins (two
taps at once, or two servers of one PostgreSQL store, cannot both), and forgotten once
its token has expired anyway.

The table is made on the first answer a notification brings (most servers never see one).
"""

from __future__ import annotations

import secrets
import time

from tailagent.store.database import Database, LazyTable

_CREATE = (
    "CREATE TABLE IF NOT EXISTS webpush_spent ("
    " nonce TEXT PRIMARY KEY, expires BIGINT NOT NULL, claim TEXT NOT NULL)"
)
# Only the first use inserts: a later one leaves the row, and the claim, as they were.
_CLAIM = (
    "INSERT INTO webpush_spent (nonce, expires, claim) VALUES (:n, :e, :c)"
    " ON CONFLICT (nonce) DO NOTHING"
)


class SpentAnswers:
    def __init__(self, database: Database) -> None:
        self._table = LazyTable(database, _CREATE)

    async def spend(self, nonce: str, expires: int) -> bool:
        """True on the nonce's first use; False for one spent before."""
        db = await self._table.ready()
        await db.execute("DELETE FROM webpush_spent WHERE expires < :t", {"t": int(time.time())})
        claim = secrets.token_hex(8)
        await db.execute(_CLAIM, {"n": nonce, "e": expires, "c": claim})
        rows = await db.fetch("SELECT claim FROM webpush_spent WHERE nonce = :n", {"n": nonce})
        return bool(rows) and rows[0][0] == claim
