"""What the desk hears of the tasks its store's other boxes run.

The desk's live views are woken by this process's saves (live.py's `Desk.saved`). A
box that shares its store with siblings also lists, and answers, the tasks they run
(cluster/carry.py carries the answer there); their saves reach this process only
through the store. So once a second it reads the tasks the others saved since the last
look and hands each to the desk as if saved here: lists, waiting badges and task pages
move for them too, a second behind at most.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from tailagent.store.tasks import CoalescingTaskStore
from tailagent.web.views.live import Desk

log = logging.getLogger(__name__)

FOLLOW_INTERVAL = 1.0


async def follow_siblings(store: CoalescingTaskStore, desk: Desk) -> None:
    """Runs for the server's life (a store no other server shares: never started)."""
    since = datetime.now(UTC).replace(tzinfo=None)
    seen: dict[str, tuple[int, str]] = {}  # task id -> the state and stamp handed on
    failing = False
    while True:
        await asyncio.sleep(FOLLOW_INTERVAL)
        try:
            changed = await store.contexts.saved_elsewhere(since)
            failing = False
        except Exception as exc:
            if not failing:  # one line per outage
                log.warning("cannot read the other boxes' tasks from the store: %s", exc)
            failing = True
            continue
        for task, owner in changed:
            stamp = task.status.timestamp.ToDatetime()
            since = max(since, stamp)
            mark = (task.status.state, stamp.isoformat())
            if seen.get(task.id) != mark:
                seen[task.id] = mark
                desk.saved(task, owner)
        if len(seen) > 10_000:  # those older than `since` come back only if saved again
            seen = {k: v for k, v in seen.items() if v[1] >= since.isoformat()}
