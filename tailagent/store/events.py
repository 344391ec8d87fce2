"""Each task's events, numbered and kept for a while, so a stream that dropped can be
taken up again where it stopped, on this server or on another that shares the store.

A task's status and artifact updates carry `metadata.sequence`: 1, 2, 3 … across all
the task's turns, given by the server that runs the turn (only one does at a time).
The events are kept in the store (`task_events`), the latest `keep` of each task and
none older than `keep_hours`; a reader asking for what followed a number older than
that is told there is a gap (it gets the task's snapshot instead, marked as such).

Writing is deferred and batched, as the task store's is: numbering an event costs the
turn a counter and an append. A reader on this server also sees what is not written
yet, so nothing is missing between the store and the live stream.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from a2a.server.events import Event
from a2a.types.a2a_pb2 import (
    StreamResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatusUpdateEvent,
)

from tailagent.store.database import Database

log = logging.getLogger(__name__)

SEQUENCE_KEY = "sequence"
# A2A's next version names this number `generation` (dev-1.1, PR #1810: a task's
# count of changes, each event carrying the count after it, a gap meaning events
# missed). The 1.0 wire has no such field, so it goes beside `sequence` in metadata.
GENERATION_KEY = "generation"
# How long written events wait, so a burst of chunks is one statement.
WRITE_DELAY = 0.05
RETRY_DELAY = 1.0
SWEEP_INTERVAL = 3600.0

Numbered = TaskStatusUpdateEvent | TaskArtifactUpdateEvent


def sequence_of(event: Event) -> int | None:
    """The number an event carries, if it is a numbered one."""
    if not isinstance(event, Numbered):
        return None
    found = event.metadata.fields.get(SEQUENCE_KEY)
    return int(found.number_value) if found is not None else None


def as_response(event: Numbered) -> StreamResponse:
    if isinstance(event, TaskStatusUpdateEvent):
        return StreamResponse(status_update=event)
    return StreamResponse(artifact_update=event)


def from_response(response: StreamResponse) -> Numbered:
    if response.HasField("status_update"):
        return response.status_update
    return response.artifact_update


@dataclass
class Replay:
    """What a reader who saw up to `after` missed: `events` in order; `gap` when some
    of them are no longer kept (the reader needs the task's snapshot first)."""

    events: list[Numbered]
    gap: bool
    last: int  # the task's latest number known here


class TaskEvents:
    def __init__(self, database: Database, keep: int = 10_000, keep_hours: float = 24.0) -> None:
        self._db = database
        self._keep = keep
        self._keep_for = timedelta(hours=keep_hours)
        self._last: dict[str, int] = {}  # task id -> its latest number, for tasks run here
        # (task id, number, event): serialized when written, in the writer's batch.
        self._unwritten: list[tuple[str, int, Numbered]] = []
        self._writer: asyncio.Task[None] | None = None
        self._swept = datetime.min.replace(tzinfo=UTC)

    async def initialize(self) -> None:
        body = "BYTEA" if self._db.postgres else "BLOB"
        await self._db.execute(
            "CREATE TABLE IF NOT EXISTS task_events ("
            " task_id TEXT NOT NULL, seq INTEGER NOT NULL, at TEXT NOT NULL,"
            f" body {body} NOT NULL, PRIMARY KEY (task_id, seq))"
        )

    async def start(self, task_id: str, new: bool = False, task: Task | None = None) -> None:
        """Before this server numbers a task's events: its numbering goes on from the
        last number the store has (an earlier turn, maybe on another server), or the
        task's own (`metadata.sequence`, its last status update's: an earlier turn's
        events may not have been kept); a task this server has just made (`new`) has
        none, and asks the store nothing."""
        if task_id in self._last:
            return
        if new:
            self._last[task_id] = 0
            return
        rows = await self._db.fetch(
            "SELECT MAX(seq) FROM task_events WHERE task_id = :t", {"t": task_id}
        )
        stored = int(rows[0][0] or 0) if rows else 0
        unwritten = (seq for t, seq, _ in self._unwritten if t == task_id)
        own = task.metadata.fields.get(SEQUENCE_KEY) if task is not None else None
        floor = int(own.number_value) if own is not None else 0
        self._last[task_id] = max(stored, *unwritten, floor)

    def number(self, task_id: str, event: Event, keep: bool = True) -> None:
        """Gives a status or artifact update its number and, unless no stream can have
        missed it (`keep` False, see executor.py), keeps it (written soon)."""
        if not isinstance(event, Numbered):
            return
        seq = self._last.get(task_id, 0) + 1
        self._last[task_id] = seq
        event.metadata.fields[SEQUENCE_KEY].number_value = seq
        event.metadata.fields[GENERATION_KEY].number_value = seq
        if not keep:
            return
        self._unwritten.append((task_id, seq, event))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write(), name="task-events-writer")

    def forget(self, task_id: str) -> None:
        """The task's turn ended here: the next turn may run on another server."""
        self._last.pop(task_id, None)

    async def since(self, task_id: str, after: int) -> Replay:
        """The task's events after number `after`, from the store and from what this
        server has not written yet."""
        rows = await self._db.fetch(
            "SELECT seq, body FROM task_events WHERE task_id = :t AND seq > :a ORDER BY seq",
            {"t": task_id, "a": after},
        )
        found: dict[int, Numbered] = {
            int(seq): from_response(StreamResponse.FromString(bytes(body))) for seq, body in rows
        }
        found.update({n: e for t, n, e in self._unwritten if t == task_id and n > after})
        numbers = sorted(found)
        kept_from = numbers[0] if numbers else None
        gap = kept_from is not None and kept_from > after + 1
        events = [found[n] for n in numbers]
        last = max([after, *numbers, self._last.get(task_id, 0)])
        return Replay(events, gap, last)

    async def latest(self, task_id: str) -> int:
        """The task's latest number (0: none yet)."""
        if task_id in self._last:
            return self._last[task_id]
        rows = await self._db.fetch(
            "SELECT MAX(seq) FROM task_events WHERE task_id = :t", {"t": task_id}
        )
        return int(rows[0][0] or 0) if rows else 0

    async def _write(self) -> None:
        """Writes the kept events in batches; an event leaves `_unwritten` only once
        written, so a cancel (the stop) or a refusal of the database loses none."""
        await asyncio.sleep(WRITE_DELAY)
        while self._unwritten:
            batch = self._unwritten[:]
            try:
                await self._insert(batch)
            except self._db.errors:
                log.warning("task events could not be written; trying again", exc_info=True)
                await asyncio.sleep(RETRY_DELAY)
                continue
            del self._unwritten[: len(batch)]

    async def _insert(self, batch: Iterable[tuple[str, int, Numbered]]) -> None:
        at = datetime.now(UTC).isoformat()  # to the batch's moment: the window is hours
        rows = [
            {"t": t, "s": s, "at": at, "b": as_response(event).SerializeToString()}
            for t, s, event in batch
        ]
        await self._db.execute(
            "INSERT INTO task_events (task_id, seq, at, body) VALUES (:t, :s, :at, :b)"
            " ON CONFLICT (task_id, seq) DO NOTHING",
            rows,
        )
        newest: dict[str, int] = {}
        for row in rows:
            newest[str(row["t"])] = max(newest.get(str(row["t"]), 0), int(str(row["s"])))
        old = [{"t": t, "s": s - self._keep} for t, s in newest.items() if s > self._keep]
        if old:
            await self._db.execute("DELETE FROM task_events WHERE task_id = :t AND seq <= :s", old)
        now = datetime.now(UTC)
        if now - self._swept > timedelta(seconds=SWEEP_INTERVAL):
            self._swept = now
            await self._db.execute(
                "DELETE FROM task_events WHERE at < :before",
                {"before": (now - self._keep_for).isoformat()},
            )

    async def aclose(self) -> None:
        """Writes what is left (the server stops)."""
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
        if self._unwritten:
            try:
                await self._insert(self._unwritten)
            except self._db.errors:
                log.exception("the last %d task events could not be written", len(self._unwritten))
            self._unwritten.clear()
