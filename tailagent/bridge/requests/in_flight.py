"""How many message sends the server works on at once; the rest wait in order.

Every send in flight holds the SDK's per-task machinery (queues, the task's
snapshots, the response being written), whatever its agent: 1,000 echo turns
started together peaked at ~160 MiB above idle, and glibc kept most of it after.
Letting `agent.max_concurrent_turns` run and the rest wait their turn (nothing is refused, nothing
times out here) bounded that to ~30 MiB, and every stream ended sooner, since the
CPU no longer shares itself among all of them. A stream that has to wait is shown
its task, submitted, before it waits (the handler makes it). A streamed turn holds its place
until it ends or pauses for an answer; real agents are fewer anyway
(`agent.max_processes`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from tailagent.output.metrics import TURNS_WAITING


class TurnGate:
    def __init__(self, limit: int) -> None:
        self._slots = asyncio.Semaphore(limit)

    def full(self) -> bool:
        """Whether a send now would wait for its place."""
        return self._slots.locked()

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        TURNS_WAITING.inc()
        try:
            await self._slots.acquire()
        finally:
            TURNS_WAITING.dec()
        try:
            yield
        finally:
            self._slots.release()
