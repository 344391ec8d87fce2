"""What keeps open pages current: a journal per watched task, and the list's pulse.

The task store tells the desk of every save (`saved`), synchronously and cheaply: it
only notes the task and wakes whoever waits. Cutting a task into entries (the work)
happens at most once per `REFRESH_INTERVAL` per watched task, and only for tasks some
page watches, so a turn of 2,000 chunks with nobody watching costs the A2A path one
dictionary lookup per save.

A journal numbers its changes. A page that lost its connection comes back with the
last number it saw (SSE's `Last-Event-ID`, `epoch.seq`) and gets exactly the entries
changed since, each once, in their latest form; a journal made after that number
(the server restarted, or forgot the task) answers with everything, marked as a
reset, so the page rebuilds instead of guessing.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from a2a.types.a2a_pb2 import Task

from tailagent.web.views.transcript import FINAL, WAITING, Entry, entries

REFRESH_INTERVAL = 0.1
MAX_JOURNALS = 256


@dataclass
class Change:
    entry: Entry | None  # None: the entry is gone (a question answered)
    key: str
    section: str
    seq: int


@dataclass
class Journal:
    task_id: str
    owner: str
    epoch: str = field(default_factory=lambda: secrets.token_hex(4))
    seq: int = 0
    changes: dict[str, Change] = field(default_factory=dict)  # key -> latest change
    woken: asyncio.Event = field(default_factory=asyncio.Event)
    pending: Task | None = None

    def apply(self, task: Task) -> None:
        """Records what differs between the task and what was recorded before."""
        fresh = {e.key: e for e in entries(task, self.owner)}
        for key, entry in fresh.items():
            before = self.changes.get(key)
            if before is None or before.entry is None or before.entry != entry:
                self.seq += 1
                # An entry keeps its place: display order is the order of first sight.
                self.changes[key] = Change(entry, key, entry.section, self.seq)
        for key, before in list(self.changes.items()):
            if key not in fresh and before.entry is not None:
                self.seq += 1
                self.changes[key] = Change(None, key, before.section, self.seq)
        self.woken.set()
        self.woken = asyncio.Event()

    def since(self, last_event_id: str) -> tuple[bool, list[Change]]:
        """(reset, changes): what a page that saw `last_event_id` is missing."""
        epoch, _, seq = last_event_id.partition(".")
        if epoch == self.epoch and seq.isdigit() and int(seq) <= self.seq:
            after = int(seq)
            return False, [c for c in self.changes.values() if c.seq > after]
        return True, [c for c in self.changes.values() if c.entry is not None]

    @property
    def event_id(self) -> str:
        return f"{self.epoch}.{self.seq}"


class Desk:
    """The live state every open page reads: journals, the unfinished tasks' states, and
    which tasks wait for an answer. Two pulses wake pages: `list_changed` (any task's
    state moved: lists re-read) and `waiting_changed` (the set of waiting tasks moved:
    every page's badge). A task page is not woken by other tasks' progress. `stopping`
    ends every live stream: set when the server begins to stop (`stop`)."""

    def __init__(self, load: Callable[[str], Awaitable[tuple[Task, str] | None]]) -> None:
        self._load = load  # a task and its owner, by id, whoever owns it
        self._journals: OrderedDict[str, Journal] = OrderedDict()
        self._scheduled: set[str] = set()
        self._pinned: Counter[str] = Counter()  # journals an open stream follows
        self._states: dict[str, int] = {}  # unfinished tasks seen here -> their state
        self._waiting: dict[str, str] = {}  # tasks waiting for an answer -> their owner
        self.list_changed = asyncio.Event()
        self.list_version = 0  # counts list_changed, so a list can be read once per change
        self.waiting_changed = asyncio.Event()
        # Conversations merged from this page -> what the merge said: their tasks' branch
        # lines say it (after a restart, the missing worktree says "merged or discarded").
        self.merged: dict[str, str] = {}
        self.stopping = asyncio.Event()

    def stop(self) -> None:
        """The server stops: every open stream ends its response now, so the server's
        wait for unfinished responses finds none (it would wait 5 s, then cut them)."""
        self.stopping.set()

    def saved(self, task: Task, owner: str) -> None:
        """The store saved a task (the hot path: notes and schedules, nothing more)."""
        state = task.status.state
        if self._states.get(task.id) != state:
            self._state_moved(task.id, owner, state)
        journal = self._journals.get(task.id)
        if journal is None:
            return
        journal.pending = task
        if task.id not in self._scheduled:
            self._scheduled.add(task.id)
            # A final state is shown at once; the chunks of a turn, a few times a second.
            delay = 0.0 if state in FINAL else REFRESH_INTERVAL
            asyncio.get_running_loop().call_later(delay, self._refresh, task.id)

    def _state_moved(self, task_id: str, owner: str, state: int) -> None:
        if state in FINAL:
            self._states.pop(task_id, None)
        else:
            self._states[task_id] = state
        self.list_version += 1
        self.list_changed.set()
        self.list_changed = asyncio.Event()
        was_waiting = task_id in self._waiting
        if state == WAITING:
            self._waiting[task_id] = owner
        else:
            self._waiting.pop(task_id, None)
        if was_waiting != (state == WAITING):
            self.waiting_changed.set()
            self.waiting_changed = asyncio.Event()

    def _refresh(self, task_id: str) -> None:
        self._scheduled.discard(task_id)
        journal = self._journals.get(task_id)
        if journal is not None and journal.pending is not None:
            task, journal.pending = journal.pending, None
            journal.apply(task)

    async def journal(self, task_id: str) -> Journal | None:
        """The task's journal, made from the stored task on first sight."""
        journal = self._journals.get(task_id)
        if journal is not None:
            self._journals.move_to_end(task_id)
            return journal
        loaded = await self._load(task_id)
        if loaded is None:
            return None
        journal = self._journals.get(task_id)  # another page may have made it meanwhile
        if journal is None:
            journal = Journal(task_id, loaded[1])
            journal.apply(loaded[0])
            self._journals[task_id] = journal
            self._forget_unwatched()
        return journal

    def _forget_unwatched(self) -> None:
        """Keeps at most MAX_JOURNALS, never one that an open page follows."""
        for task_id in list(self._journals):
            if len(self._journals) <= MAX_JOURNALS:
                return
            if not self._pinned[task_id]:
                del self._journals[task_id]

    @contextlib.asynccontextmanager
    async def answering(self, task_id: str, seconds: float) -> AsyncIterator[None]:
        """Around the send of an answer: on a normal exit, waits (at most `seconds`)
        until the task's journal no longer shows the question it showed on entry. The
        send returns once the answer is taken, before the turn resumes and saves the
        task, so a form's redirect would otherwise load a page still asking it (with
        JavaScript off nothing would ever take it away)."""
        self.pin(task_id)  # kept while waiting, so the saves that follow reach it
        try:
            journal = await self.journal(task_id)
            asked = _question_of(journal)
            yield
            deadline = asyncio.get_running_loop().time() + seconds
            while journal is not None and asked is not None and _question_of(journal) == asked:
                left = deadline - asyncio.get_running_loop().time()
                woken = journal.woken
                if left <= 0 or not await _woken(woken, left):
                    return
        finally:
            self.unpin(task_id)

    def pin(self, task_id: str) -> None:
        self._pinned[task_id] += 1

    def unpin(self, task_id: str) -> None:
        self._pinned[task_id] -= 1
        if self._pinned[task_id] <= 0:
            del self._pinned[task_id]

    def waiting_for(self, owner: str | None) -> list[str]:
        """Tasks waiting for an answer: one owner's, or everyone's (None, an admin)."""
        return [task_id for task_id, waits in self._waiting.items() if owner in (None, waits)]


def _question_of(journal: Journal | None) -> Entry | None:
    """The question a task's page shows now (None: it asks nothing)."""
    change = journal.changes.get("ask") if journal is not None else None
    return change.entry if change is not None else None


async def _woken(event: asyncio.Event, seconds: float) -> bool:
    """Whether the event came within `seconds`."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
    except TimeoutError:
        return False
    return True
