"""The boxes that share a store, each with its load: where a new conversation can go.

Each server with siblings (cluster/placement.py) keeps one row of its own: the URL its
siblings reach it at, the agent turns it holds (running or waiting for an answer), its
capacity (agent.max_processes), whether it is draining, and when it last wrote. It
writes when its load changes and every BEAT seconds, so a row older than STALE is a
box that is gone (killed, cut off): the first sibling to notice claims it and fails
the turns it was running. A server that stops deletes its own row. The table is made
on first use.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tailagent.store.database import Database, LazyTable

BEAT = 1.0
STALE = 5.0

_CREATE = (
    "CREATE TABLE IF NOT EXISTS boxes ("
    " server_id TEXT PRIMARY KEY, url TEXT NOT NULL, running INTEGER NOT NULL,"
    " capacity INTEGER NOT NULL, draining INTEGER NOT NULL, seen_ms BIGINT NOT NULL)"
)
_WRITE = (
    "INSERT INTO boxes (server_id, url, running, capacity, draining, seen_ms)"
    " VALUES (:id, :url, :running, :capacity, :draining, :seen)"
    " ON CONFLICT (server_id) DO UPDATE SET url = :url, running = :running,"
    " capacity = :capacity, draining = :draining, seen_ms = :seen"
)


@dataclass(frozen=True, slots=True)
class Box:
    server_id: str
    url: str
    running: int
    capacity: int
    draining: bool = False

    @property
    def load(self) -> float:
        """How full it is: its turns against its capacity."""
        return self.running / max(self.capacity, 1)

    @property
    def has_room(self) -> bool:
        return not self.draining and self.running < self.capacity


class BoxTable:
    def __init__(self, database: Database) -> None:
        self._table = LazyTable(database, _CREATE)

    async def write(self, box: Box) -> None:
        row = {"id": box.server_id, "url": box.url, "running": box.running,
               "capacity": box.capacity, "draining": int(box.draining),
               "seen": int(time.time() * 1000)}  # fmt: skip
        await (await self._table.ready()).execute(_WRITE, row)

    async def remove(self, server_id: str) -> None:
        db = await self._table.ready()
        await db.execute("DELETE FROM boxes WHERE server_id = :id", {"id": server_id})

    async def claim_gone(self) -> list[tuple[str, str]]:
        """(server id, URL) of the boxes that stopped writing without leaving (killed,
        cut off), each row deleted by the one statement that reads it: of all the
        boxes that notice, one claims each, once."""
        db = await self._table.ready()
        since = int((time.time() - STALE) * 1000)
        rows = await db.change(
            "DELETE FROM boxes WHERE seen_ms < :since RETURNING server_id, url", {"since": since}
        )
        return [(str(row[0]), str(row[1])) for row in rows]

    async def live(self) -> list[Box]:
        """The boxes that wrote within STALE seconds."""
        db = await self._table.ready()
        since = int((time.time() - STALE) * 1000)
        rows = await db.fetch(
            "SELECT server_id, url, running, capacity, draining FROM boxes"
            " WHERE seen_ms >= :since ORDER BY server_id",
            {"since": since},
        )
        return [Box(r[0], r[1], int(r[2]), int(r[3]), bool(r[4])) for r in rows]
