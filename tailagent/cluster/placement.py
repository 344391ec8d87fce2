"""Where a new conversation starts, among the boxes that share a store.

A Tailscale Service sends all of its callers to one host at a time (control routes
its address to a primary and moves it only when that host goes: tests/tailnet_control/
services.go does as the real control plane does), so the box the name reaches would
take every new conversation while its siblings idle. So the box that gets a new
conversation places it: on the box with the least load, its running agent turns
against its capacity (agent.max_processes), from the rows each box keeps in the store
(boxes.py). A tie stays here (no hop for nothing); a box that is full or
draining hands every new conversation to the least loaded box with room; when no box
has room it stays here, to be refused or queued as on one box.

The turns counted are the agent sessions lent to tasks: a turn running, or one whose
agent waits for a person's answer (its process is held all the while). That is what
fills a box; idle sessions give way to new ones.

A box that stops writing its row without leaving it (killed, cut off) is gone after
STALE seconds: no conversation is placed there, and the first sibling to notice fails
the turns it was running, once (boxes.py's claim), so none reads "working" for
ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from tailagent.cluster.boxes import BEAT, Box, BoxTable

log = logging.getLogger("tailagent.cluster")

# How often a box looks at its own load: a change is written at once, not at the beat.
LOOK = 0.1


def choose(here: Box, boxes: list[Box]) -> Box | None:
    """The other box a new conversation goes to, or None to start it here."""
    others = [box for box in boxes if box.server_id != here.server_id and box.has_room]
    if not others:
        return None
    best = min(others, key=lambda box: (box.load, box.server_id))
    if not here.has_room or best.load < here.load:
        return best
    return None


class Placement:
    """This box's row in the store, kept fresh, and the choice for each new conversation."""

    def __init__(
        self,
        table: BoxTable,
        server_id: str,
        url: str,
        capacity: int,
        running: Callable[[], int],
        fail_working_of: Callable[[str, str], Awaitable[list[str]]],
    ) -> None:
        """`fail_working_of(server id, URL)` fails the turns a box that died was
        running (store/opening.py's Storage does)."""
        self._table = table
        self._server_id = server_id
        self._url = url
        self._capacity = capacity
        self._running = running  # the agent sessions lent to tasks now
        self._fail_working_of = fail_working_of
        self.draining = False

    def here(self) -> Box:
        return Box(self._server_id, self._url, self._running(), self._capacity, self.draining)

    async def elsewhere(self) -> str | None:
        """The URL of the box a new conversation should start on, when not this one."""
        try:
            boxes = await self._table.live()
        except Exception as exc:  # the store's outage: start here, as alone
            log.warning("cannot read the boxes' loads from the store: %s", exc)
            return None
        chosen = choose(self.here(), boxes)
        return chosen.url if chosen is not None else None

    async def gone(self, url: str) -> bool:
        """Whether the box at `url` keeps no row any more: it stopped, or died and was
        claimed. False while the store cannot be read (nothing is taken over on a guess)."""
        try:
            return all(box.url != url for box in await self._table.live())
        except Exception as exc:
            log.warning("cannot read the boxes from the store: %s", exc)
            return False

    async def drain(self) -> None:
        """Takes no new conversations from now: says so to the siblings at once."""
        self.draining = True
        await self._write()

    async def keep_fresh(self) -> None:
        """Runs for the server's life: writes this box's row every BEAT seconds, and at
        once (within LOOK seconds) when its load changes, so siblings place on what is
        true; fails the turns of a sibling that stopped writing without leaving."""
        failing = False
        written: Box | None = None
        beat = 0.0
        while True:
            now = asyncio.get_running_loop().time()
            here = self.here()
            try:
                if here != written or now - beat >= BEAT:
                    await self._table.write(here)
                    written = here
                if now - beat >= BEAT:
                    beat = now
                    await self._bury()
                failing = False
            except Exception as exc:
                if not failing:  # one line per outage
                    log.warning("cannot write this box's load to the store: %s", exc)
                failing = True
            await asyncio.sleep(LOOK)

    async def leave(self) -> None:
        """At stop: the row goes, so no sibling sends this box a new conversation."""
        with contextlib.suppress(Exception):
            await self._table.remove(self._server_id)

    async def _bury(self) -> None:
        """Each box gone since the last look (claimed by this box alone): its working
        turns are failed, once, saying so."""
        for server, url in await self._table.claim_gone():
            failed = await self._fail_working_of(server, url)
            log.warning("the box at %s stopped answering; %d of its running turn(s) failed",
                        url, len(failed))  # fmt: skip

    async def _write(self) -> None:
        await self._table.write(self.here())
