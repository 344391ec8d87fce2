"""Agent processes (or connected sessions) started ahead of need.

Starting an agent costs far more than a short turn (an ACP handshake ~0.45 s,
Claude Code's connect 0.5–0.9 s), so a backend keeps a few started and hands each
whole to the next new conversation, never shared; a taken one is replaced in the
background.

An agent whose working directory is fixed when it starts (Claude Code's) is started in
the directory `where` names: the one the next conversation will work in (a worktree
made ahead for it). It is handed only to a conversation working there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Generic, Protocol, TypeVar

log = logging.getLogger("tailagent.agents")


class Startable(Protocol):
    @property
    def alive(self) -> bool: ...


T = TypeVar("T", bound=Startable)


class Spares(Generic[T]):
    def __init__(
        self,
        count: int,
        start: Callable[[Path | None], Awaitable[T]],
        stop: Callable[[T], Awaitable[object]],
        what: str,
        where: Callable[[], Awaitable[Path]] | None = None,
    ) -> None:
        self._count = count
        self._start = start
        self._stop = stop
        self._what = what  # for the log: "agent process", "Claude Code session"
        self._where = where
        self._ready: list[tuple[Path | None, T]] = []
        self._taken: set[Path] = set()  # directories a conversation took without a spare
        self._stale: list[T] = []  # spares whose directory went before they were taken
        self._refill: asyncio.Task[None] | None = None

    def add(self, started: T, directory: Path | None = None) -> None:
        """One started for another reason (a check at start-up) joins the spares, as one
        for `directory` when spares are started where conversations will work."""
        self._ready.append((directory, started))
        self.top_up()

    def top_up(self) -> None:
        """Starts spares in the background, up to the count."""
        if len(self._ready) < self._count and (self._refill is None or self._refill.done()):
            self._refill = asyncio.create_task(self._fill(), name=f"spare {self._what}s")

    async def _fill(self) -> None:
        while self._stale:
            await self._stop(self._stale.pop())
        while len(self._ready) < self._count:
            try:
                directory = await self._where() if self._where is not None else None
                spare = await self._start(directory)
            except Exception as exc:
                log.warning("could not start a spare %s: %s", self._what, exc)
                return
            if directory in self._taken:  # its conversation came first and started its own
                await self._stop(spare)
                continue
            self._ready.append((directory, spare))

    async def take(self, directory: Path | None = None) -> T:
        """A live spare for `directory` (any spare when they are not started in one), or
        a new one started now; either way another is on its way."""
        for entry in list(self._ready):
            where, spare = entry
            if not spare.alive:
                self._ready.remove(entry)
            elif where is not None and not where.is_dir():
                self._ready.remove(entry)
                self._stale.append(spare)
            elif self._where is None or where == directory:
                self._ready.remove(entry)
                self.top_up()
                log.debug("took a spare %s (in %s)", self._what, where or "the workspace")
                return spare
        log.debug("no spare %s for %s: starting one", self._what, directory or "the workspace")
        if self._where is not None and directory is not None:
            self._taken.add(directory)
        started = await self._start(directory)
        self.top_up()
        return started

    async def aclose(self) -> None:
        if self._refill is not None:
            self._refill.cancel()
            with contextlib.suppress(BaseException):
                await self._refill
        spares, self._ready = self._ready, []
        await asyncio.gather(*(self._stop(spare) for _, spare in spares), return_exceptions=True)
