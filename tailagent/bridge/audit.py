"""The audit log: every permission decision, who made it, and when.

Kept in the state database beside the tasks, so it survives restarts and can be
read while the server runs (`tailagent audit`).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

SUMMARY_LIMIT = 200
_CREATE = (
    "CREATE TABLE IF NOT EXISTS audit_log ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, task_id TEXT NOT NULL,"
    " context_id TEXT NOT NULL, tool TEXT NOT NULL, input TEXT NOT NULL,"
    " decision TEXT NOT NULL, reason TEXT NOT NULL, answered_by TEXT NOT NULL)"
)


@dataclass(frozen=True, slots=True)
class AuditEntry:
    task_id: str
    context_id: str
    tool: str
    input: str
    decision: str  # "allow" | "deny"
    reason: str
    answered_by: str
    at: str = ""


def summarize(tool_input: dict[str, Any]) -> str:
    """The command or input in short: enough to recognise it, bounded in size."""
    command = tool_input.get("command")
    summary = command if isinstance(command, str) else json.dumps(tool_input, ensure_ascii=False)
    return summary if len(summary) <= SUMMARY_LIMIT else summary[: SUMMARY_LIMIT - 1] + "…"


class AuditLog:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def initialize(self) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(text(_CREATE))

    async def record(self, entry: AuditEntry) -> None:
        row = asdict(entry)
        row["at"] = entry.at or datetime.now(UTC).isoformat(timespec="milliseconds")
        async with self._engine.begin() as conn:
            await conn.execute(
                text(
                    "INSERT INTO audit_log (at, task_id, context_id, tool, input, decision,"
                    " reason, answered_by) VALUES (:at, :task_id, :context_id, :tool, :input,"
                    " :decision, :reason, :answered_by)"
                ),
                row,
            )


def read_audit(database: Path, since: datetime | None = None) -> list[AuditEntry]:
    """The entries, oldest first, straight from the state database (no server needed)."""
    if not database.exists():
        return []
    with sqlite3.connect(f"file:{database}?mode=ro", uri=True) as conn:
        conn.execute("PRAGMA busy_timeout=5000")
        try:
            rows = conn.execute(
                "SELECT task_id, context_id, tool, input, decision, reason, answered_by, at"
                " FROM audit_log WHERE at >= ? ORDER BY id",
                ((since or datetime.min.replace(tzinfo=UTC)).isoformat(),),
            ).fetchall()
        except sqlite3.OperationalError:  # no decision recorded yet: no table
            return []
    return [AuditEntry(*row) for row in rows]
