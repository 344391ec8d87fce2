"""Which peer task each delegating task handed work to (box A's side of a hand-off).

Without this, a restart of the first box would forget the peer's task: its cancel could
not reach the peer, an answer given after the restart could not be relayed, and a
follow-up delegation in the same conversation would open a new conversation on the
peer instead of continuing the one the peer's agent remembers. So the link is kept in
the store beside the tasks (SQLite or the shared PostgreSQL), written as soon as the
peer names its task. When its task is removed (store/keeping.py), a link stays while it
is its conversation's newest with that peer, which a follow-up delegation continues.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from tailagent.store.database import Database

_CREATE = (
    "CREATE TABLE IF NOT EXISTS delegation_links ("
    " task_id TEXT NOT NULL, peer_url TEXT NOT NULL, peer_task_id TEXT NOT NULL,"
    " peer_context_id TEXT NOT NULL, context_id TEXT NOT NULL, created_at TEXT NOT NULL,"
    " subject TEXT NOT NULL DEFAULT '', PRIMARY KEY (task_id, peer_task_id))"
)
_INDEX = (
    "CREATE INDEX IF NOT EXISTS delegation_links_context"
    " ON delegation_links (context_id, peer_url, created_at)"
)
_ADD = (
    "INSERT INTO delegation_links"
    " (task_id, peer_url, peer_task_id, peer_context_id, context_id, created_at, subject)"
    " VALUES (:t, :u, :pt, :pc, :c, :at, :s) ON CONFLICT (task_id, peer_task_id) DO NOTHING"
)
_OF_TASK = (
    "SELECT task_id, peer_url, peer_task_id, peer_context_id, context_id"
    " FROM delegation_links WHERE task_id = :t ORDER BY created_at"
)
_PEER_CONTEXT = (
    "SELECT peer_context_id FROM delegation_links WHERE context_id = :c AND peer_url = :u"
    " ORDER BY created_at DESC LIMIT 1"
)
_SUBJECT = (
    "SELECT subject FROM delegation_links WHERE context_id = :c AND peer_url = :u"
    " AND peer_context_id = :pc AND subject <> '' ORDER BY created_at DESC LIMIT 1"
)


@dataclass(frozen=True, slots=True)
class DelegationLink:
    """One hand-off: this node's task `task_id` (in `context_id`) started the peer's
    task `peer_task_id` in the peer's conversation `peer_context_id`, at `peer_url`."""

    task_id: str
    peer_url: str
    peer_task_id: str
    peer_context_id: str
    context_id: str


class DelegationLinks:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def initialize(self) -> None:
        await self._db.execute(_CREATE)
        await self._db.execute(_INDEX)
        if "subject" not in await self._columns():  # a store from before issue 55
            await self._db.execute(
                "ALTER TABLE delegation_links ADD COLUMN subject TEXT NOT NULL DEFAULT ''"
            )

    async def _columns(self) -> set[str]:
        if self._db.postgres:
            rows = await self._db.fetch(
                "SELECT column_name FROM information_schema.columns"
                " WHERE table_name = 'delegation_links'"
            )
        else:
            rows = await self._db.fetch("SELECT name FROM pragma_table_info('delegation_links')")
        return {str(row[0]) for row in rows}

    async def add(
        self,
        task_id: str,
        peer_url: str,
        peer_task_id: str,
        peer_context_id: str,
        *,
        context_id: str,
        subject: str = "",
    ) -> None:
        """Records a hand-off once (the same peer task named again changes nothing), with
        its `subject` (the first line of the work handed, its title on the peer)."""
        await self._db.execute(
            _ADD,
            {
                "t": task_id,
                "u": peer_url,
                "pt": peer_task_id,
                "pc": peer_context_id,
                "c": context_id,
                "at": datetime.now(UTC).isoformat(),
                "s": subject,
            },
        )

    async def of_task(self, task_id: str) -> list[DelegationLink]:
        """The peer tasks this task started, oldest first."""
        rows = await self._db.fetch(_OF_TASK, {"t": task_id})
        return [DelegationLink(*(str(value) for value in row)) for row in rows]

    async def peer_context(self, context_id: str, peer_url: str) -> str | None:
        """The peer's conversation this conversation last handed work to at `peer_url`,
        which a follow-up delegation continues; None when it never did."""
        rows = await self._db.fetch(_PEER_CONTEXT, {"c": context_id, "u": peer_url})
        return str(rows[0][0]) if rows else None

    async def subject(self, context_id: str, peer_url: str, peer_context_id: str) -> str | None:
        """The subject of the last work this conversation handed into the peer's
        conversation `peer_context_id`; None when it handed none there (what another
        conversation handed there is not this one's to show)."""
        params = {"c": context_id, "u": peer_url, "pc": peer_context_id}
        rows = await self._db.fetch(_SUBJECT, params)
        return str(rows[0][0]) if rows else None
