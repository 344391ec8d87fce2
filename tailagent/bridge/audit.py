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

from sqlalchemy import Column, Integer, MetaData, Table, Text, inspect, select
from sqlalchemy.ext.asyncio import AsyncEngine

SUMMARY_LIMIT = 200
# A table, not DDL text: its id column must autoincrement in SQLite and PostgreSQL alike.
_METADATA = MetaData()
AUDIT_TABLE = Table(
    "audit_log", _METADATA,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("at", Text, nullable=False),
    *(Column(name, Text, nullable=False) for name in (
        "task_id", "context_id", "tool", "input", "decision", "reason", "answered_by"
    )),
)  # fmt: skip


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
            await conn.run_sync(_METADATA.create_all)

    async def record(self, entry: AuditEntry) -> None:
        row = asdict(entry)
        row["at"] = entry.at or datetime.now(UTC).isoformat(timespec="milliseconds")
        async with self._engine.begin() as conn:
            await conn.execute(AUDIT_TABLE.insert().values(**row))

    async def read(self, since: datetime | None = None) -> list[AuditEntry]:
        """The entries, oldest first (no server needed: `tailagent audit` reads the store)."""
        columns = [AUDIT_TABLE.c[f.name] for f in fields(AuditEntry)]
        start = (since or datetime.min.replace(tzinfo=UTC)).isoformat()
        query = select(*columns).where(AUDIT_TABLE.c.at >= start).order_by(AUDIT_TABLE.c.id)
        async with self._engine.connect() as conn:
            if not await conn.run_sync(lambda sync: inspect(sync).has_table("audit_log")):
                return []  # no decision recorded yet
            rows = (await conn.execute(query)).all()
        return [AuditEntry(*row) for row in rows]
