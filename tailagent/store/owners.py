"""Who each conversation (A2A context) belongs to.

A context id is not a secret: commit trailers print it (`A2A-Context:`), and
`tailagent call --context NAME` makes ones people can guess. Were it a capability,
anyone who learned one could run a turn in another person's agent session and
worktree, read its diff or merge it. So a conversation has an owner, the identity
that started it, kept in the store beside the tasks (so it outlives a restart and is
the same for every server sharing the store), and nobody else but an admin may use it.

An owner never changes once written: the first claim wins, also when two servers
claim one new id at once (the insert does nothing when a row is there, and the row
is read back).
"""

from __future__ import annotations

from datetime import UTC, datetime

from tailagent.store.database import Database
from tailagent.store.table import TABLE as TASKS

MAX_CACHED = 10_000

_CREATE = (
    "CREATE TABLE IF NOT EXISTS conversation_owners ("
    " context_id TEXT PRIMARY KEY, owner TEXT NOT NULL, created_at TEXT NOT NULL)"
)
_CLAIM = (
    "INSERT INTO conversation_owners (context_id, owner, created_at) VALUES (:c, :o, :t)"
    " ON CONFLICT (context_id) DO NOTHING"
)
_READ = "SELECT owner FROM conversation_owners WHERE context_id = :c"
# substr, not LIKE: SQLite's LIKE ignores case and both read `_` and `%` as wildcards.
_STARTING = "SELECT context_id, owner FROM conversation_owners WHERE substr(context_id, 1, :n) = :p"
_EXISTS_SQLITE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'conversation_owners'"
_EXISTS_POSTGRES = "SELECT 1 WHERE to_regclass('conversation_owners') IS NOT NULL"
# Conversations started before owners were kept belong to whoever made their first task.
_ADOPT = (
    "INSERT INTO conversation_owners (context_id, owner, created_at)"
    " SELECT context_id, owner, CAST(:t AS TEXT) FROM (SELECT context_id, owner,"
    "  ROW_NUMBER() OVER (PARTITION BY context_id ORDER BY last_updated, id) AS n"
    f"  FROM {TASKS} WHERE owner IS NOT NULL"
    "  AND context_id NOT IN (SELECT context_id FROM conversation_owners)) AS firsts"
    " WHERE n = 1 ON CONFLICT (context_id) DO NOTHING"
)


class ConversationOwners:
    def __init__(self, database: Database) -> None:
        self._db = database
        self._known: dict[str, str] = {}

    async def initialize(self) -> None:
        """Makes the table and, in a store that had none (one from before owners were
        kept), gives every conversation an owner: once, not at every start (a scan of
        every task, 150 ms in a store of 100,000)."""
        if await self._db.fetch(_EXISTS_POSTGRES if self._db.postgres else _EXISTS_SQLITE):
            return
        await self._db.execute(_CREATE)
        await self._db.execute(_ADOPT, {"t": _now()})

    async def owner(self, context_id: str) -> str | None:
        """The conversation's owner; None when nobody has started it."""
        known = self._known.get(context_id)
        if known is None:
            rows = await self._db.fetch(_READ, {"c": context_id})
            if rows:
                known = rows[0][0]
                self._remember(context_id, known)
        return known

    async def starting_with(self, start: str) -> list[str]:
        """The conversations, anyone's, whose id starts with `start` and is longer: what
        a short id people type back can mean (sorted). A scan of the table, made only for
        a name that is no conversation's whole id."""
        if not start:
            return []
        rows = await self._db.fetch(_STARTING, {"n": len(start), "p": start})
        for context_id, owner in rows:
            self._remember(context_id, owner)
        return sorted(c for c, _ in rows if c != start)

    async def context_ids(self) -> set[str]:
        """Every conversation that has an owner: it exists, whether or not tasks remain."""
        rows = await self._db.fetch("SELECT context_id FROM conversation_owners")
        return {row[0] for row in rows}

    async def start(self, context_id: str, owner: str) -> None:
        """Records the owner of a conversation this server just named (a fresh id that
        nobody else can have yet: no read first)."""
        await self._db.execute(_CLAIM, {"c": context_id, "o": owner, "t": _now()})
        self._remember(context_id, owner)

    async def claim(self, context_id: str, owner: str) -> str:
        """The conversation's owner, made `owner` if it had none: whoever names an id
        first starts that conversation, and nobody can join it later."""
        known = await self.owner(context_id)
        if known is not None:
            return known
        await self._db.execute(_CLAIM, {"c": context_id, "o": owner, "t": _now()})
        rows = await self._db.fetch(_READ, {"c": context_id})
        self._remember(context_id, rows[0][0])
        return str(rows[0][0])

    def _remember(self, context_id: str, owner: str) -> None:
        """Owners never change, so a cached one is never stale; the cache is bounded,
        the table has them all."""
        self._known[context_id] = owner
        if len(self._known) > MAX_CACHED:
            for stale in list(self._known)[: MAX_CACHED // 2]:
                del self._known[stale]


def _now() -> str:
    return datetime.now(UTC).isoformat()
