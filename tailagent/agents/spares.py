"""Agent processes (or connected sessions) started ahead of need.

Starting an agent costs far more than a short turn (an ACP handshake ~0.45 s,
Claude Code's connect 0.5–0.9 s), so a backend keeps a few started and hands each
whole to the next new conversation, never shared; a taken one is replaced in the
background.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, Protocol, TypeVar

from tailagent.agents.events import AgentStartError

log = logging.getLogger("tailagent.agent")


class Startable(Protocol):
    @property
    def alive(self) -> bool: ...


T = TypeVar("T", bound=Startable)


class Spares(Generic[T]):
    def __init__(
        self,
        count: int,
        start: Callable[[], Awaitable[T]],
        stop: Callable[[T], Awaitable[object]],
        what: str,
    ) -> None:
        self._count = count
        self._start = start
        self._stop = stop
        self._what = what  # for the log: "agent process", "Claude Code session"
        self._ready: list[T] = []
        self._refill: asyncio.Task[None] | None = None

    def add(self, started: T) -> None:
        """One started for another reason (a check at start-up) joins the spares."""
        self._ready.append(started)
        self.top_up()

    def top_up(self) -> None:
        """Starts spares in the background, up to the count."""
        if len(self._ready) < self._count and (self._refill is None or self._refill.done()):
            self._refill = asyncio.create_task(self._fill(), name=f"spare {self._what}s")

    async def _fill(self) -> None:
        while len(self._ready) < self._count:
            try:
                self._ready.append(await self._start())
            except AgentStartError as exc:
                log.warning("could not start a spare %s: %s", self._what, exc)
                return

    async def take(self) -> T:
        """A live spare, or a new one started now; either way another is on its way."""
        while self._ready:
            spare = self._ready.pop(0)
            if spare.alive:
                self.top_up()
                return spare
        started = await self._start()
        self.top_up()
        return started

    async def aclose(self) -> None:
        if self._refill is not None:
            self._refill.cancel()
            with contextlib.suppress(BaseException):
                await self._refill
        spares, self._ready = self._ready, []
        await asyncio.gather(*(self._stop(spare) for spare in spares), return_exceptions=True)
