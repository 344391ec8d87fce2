"""The task list as the desk reads it: pages of rows, shared between everyone watching.

The list page and its live stream both show it, and it changes for its own reasons
(what comes first, how older pages are linked, how reads are shared), so it stands
apart from both. Every open list of one person (or of the admins) shares one store
read per change, even the ones woken together.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field, replace
from typing import Any

from a2a.types.a2a_pb2 import Task

from tailagent.access.identity import Caller
from tailagent.bridge.conversations.fates import fates
from tailagent.bridge.conversations.workplace import Conversations
from tailagent.store.table import Position
from tailagent.store.tasks import CoalescingTaskStore, position
from tailagent.web.views.live import Desk
from tailagent.web.views.transcript import Row, row

LIST_LIMIT = 50
LIST_CACHE = 64  # people whose list is kept between changes
# Where a page of older tasks starts: `<microseconds>-<task id>` (see `position` in
# store/tasks.py).
OLDER = re.compile(r"(\d{1,20})-([\w.:-]{1,200})")


@dataclass(frozen=True)
class ListPage:
    """One page of the list: its rows (of `tasks`, in their order), and where the next
    (older) page starts."""

    rows: list[Row]
    older: str  # the next page's `older=` value; "" on the last page
    tasks: list[Task] = field(default_factory=list)


@dataclass
class TaskLists:
    """Reads pages of the list for a caller, one read per (scope, page) and change."""

    store: CoalescingTaskStore
    desk: Desk
    conversations: Conversations
    # (scope, page) -> (list version, its read)
    reads: dict[tuple[str | None, str], tuple[int, asyncio.Task[ListPage]]] = field(
        default_factory=dict
    )

    async def rows(self, caller: Caller, older: str = "") -> tuple[ListPage, list[str]]:
        scope = None if caller.may("admin") else caller.owner
        version = self.desk.list_version
        cached = self.reads.get((scope, older))
        if cached is None or cached[0] != version or cached[1].cancelled():
            read = asyncio.ensure_future(self._read(scope, older))
            cached = self.reads[(scope, older)] = (version, read)
            if len(self.reads) > LIST_CACHE:
                self.reads.pop(next(iter(self.reads)))
        page = await asyncio.shield(cached[1])
        return await self._fates(page), self.desk.waiting_for(scope)

    async def _fates(self, page: ListPage) -> ListPage:
        """The page with each row whose turn's change was merged or discarded since
        saying so: read at every view (a merge or a discard moves no task, so the
        shared read does not change with it), from records only
        (bridge/conversations/fates.py)."""
        said = await fates(self.conversations, page.tasks)
        if not said:
            return page
        # A row whose turn changed nothing says nothing of merging: its idle branch was
        # neither merged nor discarded.
        rows = [
            replace(r, change=said[r.task_id]) if r.change and r.task_id in said else r
            for r in page.rows
        ]
        return replace(page, rows=rows)

    async def _read(self, scope: str | None, older: str) -> ListPage:
        """A page of the list. The first starts with every task that waits for an answer,
        however old: a question must never hide on a later page."""
        recent = await self.store.recent(scope, LIST_LIMIT, _position(older))
        more = _older_of(position(recent[-1][0])) if len(recent) == LIST_LIMIT else ""
        found = {task.id: (task, owner) for task, owner in recent}
        if not older:
            for task_id in self.desk.waiting_for(scope):
                if task_id not in found and (held := await self.store.with_owner(task_id)):
                    found[task_id] = held
        listed = [(row(task, owner), task) for task, owner in found.values()]
        if not older:  # waiting first; sorted is stable, so newest first within each
            listed.sort(key=lambda pair: not pair[0].waiting)
        return ListPage([r for r, _ in listed], more, [task for _, task in listed])


def list_context(page: ListPage, waiting: list[str], older: str) -> dict[str, Any]:
    """What the list's templates (the page, and the rows its stream sends) are given."""
    return {"rows": page.rows, "more": page.older, "older": older, "waiting": waiting}


def _older_of(where: Position) -> str:
    return f"{where[0]}-{where[1]}"


def _position(older: str) -> Position | None:
    match = OLDER.fullmatch(older)
    return (int(match.group(1)), match.group(2)) if match else None
