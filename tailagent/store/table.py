"""The tasks table, read and written in tailagent's own SQL (tasks.py is the store in
front of it, which holds running tasks in memory and coalesces their saves).

The table is a2a-sdk's (`tasks`, as its DatabaseTaskStore defines it), so the SDK's
store, which still serves ListTasks, and any tool that knows it read the same rows.
tailagent runs its own statements on it for everything else a server does all the
time: a turn's saves (on SQLite; PostgreSQL saves through the SDK), a task read back,
the page's recent tasks, the start's settling of what the last run left. Rows are
written exactly as the SDK writes them (the same columns, JSON text and timestamp
format; a test compares them byte for byte).
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import Task, TaskState
from google.protobuf.json_format import MessageToDict, ParseDict, SerializeToJsonError
from google.protobuf.struct_pb2 import Struct, Value

from tailagent.store.database import Database
from tailagent.store.finality import UNFINISHED_STATES
from tailagent.store.sdk_stores import OwnerUser, SdkStores

TABLE = "tasks"
# The SDK's store marks each row with the protocol version of its format.
PROTOCOL_VERSION = "1.0"
# The table as a2a-sdk's model makes it in SQLite (SQLAlchemy's DDL for it).
SQLITE_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    " id VARCHAR(36) NOT NULL, context_id VARCHAR(36) NOT NULL, kind VARCHAR(16) NOT NULL,"
    " owner VARCHAR(255), last_updated DATETIME, status JSON NOT NULL, artifacts JSON,"
    " history JSON, protocol_version VARCHAR(16), metadata JSON, PRIMARY KEY (id))",
    f"CREATE INDEX IF NOT EXISTS ix_{TABLE}_id ON {TABLE} (id)",
    f"CREATE INDEX IF NOT EXISTS idx_{TABLE}_owner_last_updated ON {TABLE} (owner, last_updated)",
)
COLUMNS = (
    "id", "context_id", "kind", "owner", "last_updated", "status", "artifacts", "history",
    "protocol_version", "metadata",
)  # fmt: skip
_UPSERT = (
    f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES ({', '.join(':' + c for c in COLUMNS)})"
    " ON CONFLICT (id) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c != "id")
)
# The columns a Task is made of, in the order `_task` takes them.
_READ = "id, context_id, owner, status, artifacts, history, metadata, protocol_version"
_UNFINISHED = [TaskState.Name(state) for state in UNFINISHED_STATES]
# A place in the newest-first order of tasks: (last update in microseconds, task id).
Position = tuple[int, str]


class TaskTable:
    def __init__(self, database: Database, sdk: SdkStores) -> None:
        self._db = database
        self._sdk = sdk
        self._state = database.json_text("status", "state")
        self._unfinished = ", ".join(f":s{i}" for i in range(len(_UNFINISHED)))
        self._states = {f"s{i}": name for i, name in enumerate(_UNFINISHED)}

    async def create(self) -> None:
        """Makes the table if it is not there yet (a new store)."""
        if self._db.postgres:
            await self._sdk.tasks()  # its own DDL, types and all
            return
        for statement in SQLITE_SCHEMA:
            await self._db.execute(statement)

    async def save(self, task: Task, owner: str, shown: dict[str, Any] | None = None) -> None:
        """Writes the task's row; `shown`, its MessageToDict rendering, if made already."""
        if self._db.postgres:
            await (await self._sdk.tasks()).save(task, ServerCallContext(user=OwnerUser(owner)))
            return
        await self._db.execute(_UPSERT, row_of(task, owner, shown))

    async def get(self, task_id: str, owner: str) -> Task | None:
        rows = await self._db.fetch(
            f"SELECT {_READ} FROM {TABLE} WHERE id = :id AND owner = :owner",
            {"id": task_id, "owner": owner},
        )
        return _task(rows[0]) if rows else None

    async def owner_of(self, task_id: str) -> str | None:
        rows = await self._db.fetch(f"SELECT owner FROM {TABLE} WHERE id = :id", {"id": task_id})
        return rows[0][0] if rows else None

    async def delete(self, task_id: str, owner: str) -> None:
        await self._db.execute(
            f"DELETE FROM {TABLE} WHERE id = :id AND owner = :owner",
            {"id": task_id, "owner": owner},
        )

    async def recent(
        self, owner: str | None, limit: int, before: Position | None = None
    ) -> list[tuple[Task, str]]:
        """The latest tasks with their owners, newest first: one owner's, or everyone's;
        with `before`, only those that sort after that position (see tasks.position)."""
        params: dict[str, Any] = {"limit": limit}
        where: list[str] = []
        if owner is not None:
            where.append("owner = :owner")
            params["owner"] = owner
        if before is not None:
            moment = datetime.fromtimestamp(before[0] / 1e6, UTC).replace(tzinfo=None)
            params["at"] = moment if self._db.postgres else sqlite_datetime(moment)
            params["id"] = before[1]
            where.append("(last_updated < :at OR (last_updated = :at AND id < :id))")
        clause = f"WHERE {' AND '.join(where)} " if where else ""
        rows = await self._db.fetch(
            f"SELECT {_READ} FROM {TABLE} {clause}ORDER BY last_updated DESC, id DESC LIMIT :limit",
            params,
        )
        return [(_task(row), row[2] or "") for row in rows]

    async def updated_since(
        self, moment: datetime, server_key: str, server: str
    ) -> list[tuple[Task, str]]:
        """The tasks a server other than `server` saved at or after `moment` (naive
        UTC, as stored), oldest first, with their owners."""
        runner = self._db.json_text("metadata", server_key)
        at = moment if self._db.postgres else sqlite_datetime(moment)
        rows = await self._db.fetch(
            f"SELECT {_READ} FROM {TABLE} WHERE last_updated >= :at"
            f" AND {runner} IS NOT NULL AND {runner} != :server ORDER BY last_updated",
            {"at": at, "server": server},
        )
        return [(_task(row), row[2] or "") for row in rows]

    async def unfinished(self, server_key: str, server: str) -> list[tuple[Task, str]]:
        """Tasks left unfinished by `server` (named in the metadata under `server_key`),
        or by no server, with their owners."""
        runner = self._db.json_text("metadata", server_key)
        rows = await self._db.fetch(
            f"SELECT {_READ} FROM {TABLE} WHERE {self._state} IN ({self._unfinished})"
            f" AND ({runner} = :server OR {runner} IS NULL)",
            {**self._states, "server": server},
        )
        return [(_task(row), row[2] or "") for row in rows]

    async def running_elsewhere(
        self, context_id: str, server_key: str, url_key: str, server: str
    ) -> tuple[str, str | None] | None:
        """(task id, runner's URL) of an unfinished task in the context that a server
        other than `server` runs."""
        runner = self._db.json_text("metadata", server_key)
        rows = await self._db.fetch(
            f"SELECT id, {self._db.json_text('metadata', url_key)} FROM {TABLE}"
            f" WHERE context_id = :context AND {self._state} IN ({self._unfinished})"
            f" AND {runner} IS NOT NULL AND {runner} != :server LIMIT 1",
            {**self._states, "context": context_id, "server": server},
        )
        return (rows[0][0], rows[0][1]) if rows else None

    async def last_runner(
        self, context_id: str, server_key: str, url_key: str
    ) -> tuple[str, str] | None:
        """(server id, URL) of the server that ran the context's latest task: where its
        worktree is, in a store several servers share."""
        runner = self._db.json_text("metadata", server_key)
        rows = await self._db.fetch(
            f"SELECT {runner}, {self._db.json_text('metadata', url_key)} FROM {TABLE}"
            f" WHERE context_id = :context AND {runner} IS NOT NULL"
            " ORDER BY last_updated DESC, id DESC LIMIT 1",
            {"context": context_id},
        )
        return (rows[0][0], rows[0][1] or "") if rows else None

    async def context_ids(self) -> set[str]:
        return {row[0] for row in await self._db.fetch(f"SELECT DISTINCT context_id FROM {TABLE}")}

    async def index_contexts(self) -> None:
        """Tasks by context: a server sharing the store looks up a context's running task
        on another server before it starts a turn there."""
        await self._db.execute(
            f"CREATE INDEX IF NOT EXISTS ix_{TABLE}_context_id ON {TABLE} (context_id)"
        )


def row_of(task: Task, owner: str, shown: dict[str, Any] | None = None) -> dict[str, Any]:
    """The row a2a-sdk's store writes for the task, as SQLite stores it: JSON as text
    (None as `null`, as SQLAlchemy's JSON type writes it) and the timestamp in
    SQLAlchemy's SQLite format. `shown`: the task as MessageToDict renders it, when the
    caller has rendered it already (tasks.py does, once, for the row and the answer)."""
    shown = _row_parts(task) if shown is None else shown
    status = task.status
    updated = status.timestamp.ToDatetime() if status.HasField("timestamp") else None
    return {
        "id": task.id,
        "context_id": task.context_id,
        "kind": "task",
        "owner": owner,
        "last_updated": sqlite_datetime(updated) if updated is not None else None,
        "status": json.dumps(shown.get("status", {})),
        "artifacts": json.dumps(shown.get("artifacts", [])),
        "history": json.dumps(shown.get("history", [])),
        "protocol_version": PROTOCOL_VERSION,
        "metadata": json.dumps(shown.get("metadata") if task.metadata.fields else None),
    }


def _row_parts(task: Task) -> dict[str, Any]:
    """The parts of a task a row holds, as MessageToDict of the whole task renders them,
    the metadata (most of a row, and the dearest to render) in a third of its time:
    what a row written with no rendering at hand costs (a stream's saves, a long turn's
    deferred ones)."""
    return {
        "status": MessageToDict(task.status),
        "artifacts": [MessageToDict(artifact) for artifact in task.artifacts],
        "history": [MessageToDict(message) for message in task.history],
        "metadata": struct_dict(task.metadata),
    }


def struct_dict(struct: Struct) -> dict[str, Any]:
    """A Struct as MessageToDict gives it, key for key. Like it, refuses a number JSON
    cannot hold."""
    return {key: _plain(value) for key, value in struct.fields.items()}


def _plain(value: Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return struct_dict(value.struct_value)
    if kind == "list_value":
        return [_plain(item) for item in value.list_value.values]
    if kind == "number_value" and not math.isfinite(value.number_value):
        raise SerializeToJsonError(f"a Struct's number is not finite: {value.number_value}")
    return None if kind in (None, "null_value") else getattr(value, kind)


def sqlite_datetime(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S.%f")


def _json(value: Any) -> Any:
    """A JSON column's value: text from SQLite (and asyncpg), already parsed elsewhere."""
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def _task(row: tuple[Any, ...]) -> Task:
    task_id, context_id, _, status, artifacts, history, metadata, version = row
    if version != PROTOCOL_VERSION:
        return _legacy_task(row)
    task = Task(id=task_id, context_id=context_id)
    if status := _json(status):
        ParseDict(status, task.status)
    for artifact in _json(artifacts) or ():
        ParseDict(artifact, task.artifacts.add())
    for message in _json(history) or ():
        ParseDict(message, task.history.add())
    if metadata := _json(metadata):
        task.metadata.update(metadata)
    return task


def _legacy_task(row: tuple[Any, ...]) -> Task:
    """A row an 0.3 a2a-sdk wrote, converted by the SDK (which imports SQLAlchemy)."""
    from a2a.compat.v0_3.model_conversions import compat_task_model_to_core
    from a2a.server.models import TaskModel

    task_id, context_id, owner, status, artifacts, history, metadata, version = row
    model = TaskModel(
        id=task_id, context_id=context_id, owner=owner, status=_json(status),
        artifacts=_json(artifacts), history=_json(history), task_metadata=_json(metadata),
        protocol_version=version,
    )  # fmt: skip
    return compat_task_model_to_core(model)
