"""The audit log: every permission decision, who made it, and when.

Kept in the store beside the tasks (SQLite in the state dir, or the PostgreSQL
database servers share), so it survives restarts and can be read while the server
runs (`tailagent audit`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from datetime import UTC, datetime
from typing import Any

from tailagent.store.database import Database

SUMMARY_LIMIT = 200
_TEXT_COLUMNS = ("task_id", "context_id", "tool", "input", "decision", "reason", "answered_by")
# The id counts up in both databases: SQLite's INTEGER PRIMARY KEY is the row id.
_CREATE = (
    "CREATE TABLE IF NOT EXISTS audit_log (id {key}, at TEXT NOT NULL, "
    + ", ".join(f"{name} TEXT NOT NULL" for name in _TEXT_COLUMNS)
    + ")"
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
    # How the agent was fenced when the step ran: "sandbox on, network on" ("" in rows
    # written before tailagent had a sandbox).
    fence: str = ""


def summarize(tool_input: dict[str, Any]) -> str:
    """The command or input in short: enough to recognise it, bounded in size."""
    command = tool_input.get("command")
    summary = command if isinstance(command, str) else json.dumps(tool_input, ensure_ascii=False)
    return summary if len(summary) <= SUMMARY_LIMIT else summary[: SUMMARY_LIMIT - 1] + "…"


class AuditLog:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def initialize(self) -> None:
        key = "SERIAL PRIMARY KEY" if self._db.postgres else "INTEGER PRIMARY KEY"
        await self._db.execute(_CREATE.format(key=key))
        if "fence" not in await self._columns():  # a store from before the sandbox
            await self._db.execute(
                "ALTER TABLE audit_log ADD COLUMN fence TEXT NOT NULL DEFAULT ''"
            )

    async def _columns(self) -> set[str]:
        if self._db.postgres:
            rows = await self._db.fetch(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'audit_log'"
            )
        else:
            rows = await self._db.fetch("SELECT name FROM pragma_table_info('audit_log')")
        return {str(row[0]) for row in rows}

    async def record(self, entry: AuditEntry) -> None:
        row = asdict(entry)
        row["at"] = entry.at or datetime.now(UTC).isoformat(timespec="milliseconds")
        columns, values = ", ".join(row), ", ".join(":" + name for name in row)
        await self._db.execute(f"INSERT INTO audit_log ({columns}) VALUES ({values})", row)

    async def read(self, since: datetime | None = None) -> list[AuditEntry]:
        """The entries, oldest first (no server needed: `tailagent audit` reads the store)."""
        start = (since or datetime.min.replace(tzinfo=UTC)).isoformat()
        if not await self._exists():
            return []  # no decision recorded yet
        kept = await self._columns()  # a store not yet opened by this version has no fence
        columns = ", ".join(f.name if f.name in kept else "''" for f in fields(AuditEntry))
        rows = await self._db.fetch(
            f"SELECT {columns} FROM audit_log WHERE at >= :start ORDER BY id", {"start": start}
        )
        return [AuditEntry(*row) for row in rows]

    async def _exists(self) -> bool:
        if self._db.postgres:
            rows = await self._db.fetch("SELECT to_regclass('audit_log') IS NOT NULL")
            return bool(rows[0][0])
        rows = await self._db.fetch(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'audit_log'"
        )
        return bool(rows)
