"""a2a-sdk 1.3.0's cluster store (`a2a.server.cluster`) against tailagent's own
(store/events.py), on PostgreSQL: what a long turn's events cost the turn, and how
soon another box sees each one.

One turn of --events artifact chunks (40 bytes of text each, appended to one artifact,
as an agent streams its answer), each way on a PostgreSQL server of its own, started
as the suite starts it (tests/postgres.py: loopback, `synchronous_commit=off`):
  - the SDK's way, as its cluster request handler does: each event applied to the task
    (`append_artifact_to_task`) and saved with it, `VersionedDatabaseTaskStore.save`
    (the version's compare-and-swap, the whole task, the event: one transaction) awaited
    before the next; another box follows with `DatabaseTaskEventStream.subscribe`
    (its own engine, the SDK's poll every 0.5 s);
  - tailagent's: each event numbered (`TaskEvents.number`, a counter and an append),
    the store written behind in batches every 50 ms; another box follows as
    resumption.py does, `TaskEvents.since` every 0.2 s (signals.POLL_INTERVAL). The
    task's own snapshot is coalesced the same way (store/tasks.py) and not counted here.
The agent gives a chunk every --pace seconds (5 ms: 200 a second, a fast model's
stream). Measures how much longer than that the turn took (the store's cost to the
turn: total, and per event), and for each event the lag from its production to the
follower's receipt (median, p95, max).

Usage: python bench/bench_cluster_store.py [--events 2000] [--pace 0.005]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from a2a.server.cluster import DatabaseTaskEventStream, TaskVersion, VersionedDatabaseTaskStore
from a2a.server.context import ServerCallContext
from a2a.server.tasks.task_manager import append_artifact_to_task
from a2a.types.a2a_pb2 import Artifact, Part, Task, TaskArtifactUpdateEvent, TaskState, TaskStatus
from sqlalchemy.ext.asyncio import create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_core import pct
from tailagent.store.database import EngineDatabase
from tailagent.store.events import TaskEvents, sequence_of
from tailagent.store.signals import POLL_INTERVAL
from tests.postgres import running_postgres

CHUNK = "x" * 40


def chunk(task_id: str, n: int) -> TaskArtifactUpdateEvent:
    return TaskArtifactUpdateEvent(
        task_id=task_id, context_id="ctx", append=n > 0,
        artifact=Artifact(artifact_id="answer", parts=[Part(text=CHUNK)]),
    )  # fmt: skip


def working(task_id: str) -> Task:
    return Task(id=task_id, context_id="ctx",
                status=TaskStatus(state=TaskState.TASK_STATE_WORKING))  # fmt: skip


async def follow(
    events: int, produced: dict[int, float], stream: AsyncIterator[int]
) -> list[float]:
    """Each event's lag, from when it was produced to when the follower had it."""
    lags = []
    async for n in stream:
        lags.append(time.perf_counter() - produced[n])
        if len(lags) == events:
            break
    return lags


async def sdk_way(url: str, events: int, pace: float) -> tuple[float, list[float]]:
    writer, reader = create_async_engine(url), create_async_engine(url)
    store = VersionedDatabaseTaskStore(writer)
    await store.initialize()
    follower = DatabaseTaskEventStream(reader)
    context, task = ServerCallContext(), working("sdk-task")
    version = await store.save(task, event=None, prev=None, prev_version=TaskVersion.MISSING,
                               context=context)  # fmt: skip
    produced: dict[int, float] = {}

    async def numbers() -> AsyncIterator[int]:
        received = 0  # in order: the n-th event received is the n-th produced
        async for _ in follower.subscribe(task.id, after=version):
            received += 1
            yield received

    following = asyncio.create_task(follow(events, produced, numbers()))
    started = time.perf_counter()
    for n in range(events):
        event = chunk(task.id, n)
        before = Task()
        before.CopyFrom(task)
        append_artifact_to_task(task, event)
        produced[n + 1] = time.perf_counter()
        version = await store.save(task, event=event, prev=before, prev_version=version,
                                   context=context)  # fmt: skip
        await asyncio.sleep(pace)  # the agent's next chunk
    took = time.perf_counter() - started - events * pace
    lags = await following
    await writer.dispose()
    await reader.dispose()
    return took, lags


async def tailagent_way(url: str, events: int, pace: float) -> tuple[float, list[float]]:
    writer, reader = EngineDatabase(url), EngineDatabase(url)
    kept, other = TaskEvents(writer), TaskEvents(reader)
    await kept.initialize()
    await kept.start("ta-task", new=True)
    produced: dict[int, float] = {}

    async def numbers() -> AsyncIterator[int]:
        after = 0
        while True:
            replay = await other.since("ta-task", after)
            for event in replay.events:
                number = sequence_of(event)
                assert number is not None
                after = number
                yield number
            await asyncio.sleep(POLL_INTERVAL)

    following = asyncio.create_task(follow(events, produced, numbers()))
    started = time.perf_counter()
    for n in range(events):
        event = chunk("ta-task", n)
        produced[n + 1] = time.perf_counter()
        kept.number("ta-task", event)
        await asyncio.sleep(pace)  # the agent's next chunk
    took = time.perf_counter() - started - events * pace
    lags = await following
    await kept.aclose()
    await writer.aclose()
    await reader.aclose()
    return took, lags


def report(label: str, took: float, lags: list[float], events: int) -> None:
    per = took / events * 1000
    print(f"{label:<11} the turn waited {took:7.3f} s more ({per:.3f} ms an event); lag to the "
          f"other box: median {statistics.median(lags) * 1000:.0f} ms, p95 "
          f"{pct(lags, 95) * 1000:.0f} ms, max {max(lags) * 1000:.0f} ms")  # fmt: skip


async def run(events: int, pace: float) -> None:
    ways: list[tuple[str, Callable[[str, int, float], Awaitable[tuple[float, list[float]]]]]] = [
        ("a2a-sdk", sdk_way), ("tailagent", tailagent_way)]  # fmt: skip
    for label, way in ways:  # each on a database server of its own: both name task_events
        with running_postgres() as pg:
            took, lags = await way(pg.url, events, pace)
        report(label, took, lags, events)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--pace", type=float, default=0.005, help="seconds between chunks")
    args = parser.parse_args()
    asyncio.run(run(args.events, args.pace))
    return 0


if __name__ == "__main__":
    sys.exit(main())
