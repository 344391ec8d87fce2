"""A task store that keeps every state a caller must be able to rely on durable,
and coalesces the rest.

a2a-sdk saves the whole task on every event of a turn: each streamed chunk and
each working status costs a SQLite transaction. Through this store only three
kinds of save reach the database at once: a task's first save, and every save
that leaves it in a final or paused state (the states a caller acts on). The
saves in between (a task that is still working) are kept in memory and written
by one background writer within WRITE_DELAY, the latest snapshot per task. Reads of
a task this process holds come from memory. The rows themselves, in a2a-sdk's own
`tasks` table, are table.py's.

After a crash, a task may therefore miss the last intermediate updates of the
turn that crashed, and reads as failed by the restart rule anyway; nothing a
caller saw as finished or waiting for them is ever lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from a2a.server.context import ServerCallContext
from a2a.server.id_generator import IDGenerator, IDGeneratorContext
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.tasks import TaskStore
from a2a.types.a2a_pb2 import ListTasksRequest, ListTasksResponse, Task, TaskState
from google.protobuf.json_format import MessageToDict

from tailagent.output.metrics import TASK_STATES
from tailagent.store.finality import UNFINISHED_STATES, mark_failed
from tailagent.store.keeping import TaskKeeping
from tailagent.store.sdk_stores import SdkStores
from tailagent.store.table import Position, TaskTable

log = logging.getLogger(__name__)

# Between tries to write a state the database refused (it is down, or restarting).
RETRY_DELAY = 1.0
FLUSH_WAIT = 1.0
_DEFERRABLE = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
# When a task was made (ISO 8601, UTC): its status timestamp moves with every update,
# and A2A gives a task no creation time of its own.
STARTED_AT_KEY = "tailagentStartedAt"
# Task metadata naming the server that runs the task, in a store several may share.
SERVER_ID_KEY = "tailagentServerId"
SERVER_URL_KEY = "tailagentServerUrl"
# Set in a request's call context when its caller can learn of the task only from
# the response, which comes once the task is final or waiting: a blocking SendMessage
# with no push config, in a store no other server reads.
UNSEEN_UNTIL_SETTLED = "tailagent.unseenUntilSettled"
# Left in such a request's call context by the write of its settled task: (the task as
# the SDK holds it, its MessageToDict rendering). Rendering a task is the dearest step of
# a quick turn (~0.1 ms), and its row and its answer render the same task: the answer
# takes this one (mends/jsonrpc.py) when the task it answers with is still equal to it.
ANSWER_KEY = "tailagent.answer"
WRITE_DELAY = 0.05
MAX_MINTED = 10_000
# The call-context state key of the person a request acts for, as the access layer's
# context builder (and the desk's) put them there.
PERSON_KEY = "caller"


@dataclass(frozen=True, slots=True)
class OwnerScope:
    """Whose tasks and conversations a request reaches: `owner`'s own, or, with
    `everyone`, anyone's (what it makes stays `owner`'s either way).

    The store keeps rows for a scope and decides no roles: who may reach everyone's is
    the access layer's to say, through the person in the request (`ScopedPerson`).
    """

    owner: str
    everyone: bool = False

    def reaches(self, owner: str | None) -> bool:
        """Whether a row or a conversation kept for `owner` is within this scope; one that
        nobody owns is within none."""
        return owner is not None and (self.everyone or owner == self.owner)


@runtime_checkable
class ScopedPerson(Protocol):
    """What the store reads of a request's person: whether their scope is everyone's."""

    @property
    def sees_every_task(self) -> bool: ...


def owner_scope(context: ServerCallContext) -> OwnerScope:
    """The request's owner scope: its user's own tasks, or everyone's when its person
    says so."""
    person = context.state.get(PERSON_KEY)
    everyone = isinstance(person, ScopedPerson) and person.sees_every_task
    return OwnerScope(resolve_user_scope(context), everyone)


class MintedIds(IDGenerator):
    """Ids this process generated for new tasks or contexts, with nothing stored under
    them yet: a store can answer "not found" for them without asking the database.

    Handed to a2a-sdk as its id generator. Ids whose request failed before anything
    was stored are forgotten oldest first, past a bound.
    """

    def __init__(self) -> None:
        self._ids: dict[str, None] = {}

    def generate(self, context: IDGeneratorContext | None = None) -> str:
        new_id = str(uuid.uuid4())
        self._ids[new_id] = None
        if len(self._ids) > MAX_MINTED:
            for stale in list(self._ids)[: MAX_MINTED // 2]:
                del self._ids[stale]
        return new_id

    def __contains__(self, some_id: object) -> bool:
        return some_id in self._ids

    def discard(self, some_id: str) -> None:
        self._ids.pop(some_id, None)


class ContextRunners:
    """In a store several servers share: which other server runs, or last ran, a
    conversation's turns, and what the others saved lately. A context this server's
    pool knows is the pool's to answer for; alone on its store, a server hears None."""

    def __init__(self, table: TaskTable, server_id: str, shared: bool, minted: MintedIds) -> None:
        self._table = table
        self._server_id = server_id
        self._shared = shared
        self._minted = minted  # ids this server just minted: no other can have run them

    def _asks(self, context_id: str) -> bool:
        return self._shared and context_id not in self._minted

    async def busy_elsewhere(self, context_id: str) -> tuple[str, str] | None:
        """(task id, server URL) of an unfinished task that another server runs in
        the context."""
        if not self._asks(context_id):
            return None
        found = await self._table.running_elsewhere(
            context_id, SERVER_ID_KEY, SERVER_URL_KEY, self._server_id
        )
        return (found[0], found[1] or "another server") if found is not None else None

    async def saved_elsewhere(self, moment: datetime) -> list[tuple[Task, str]]:
        """The tasks other servers saved at or after `moment` (naive UTC), with their
        owners, oldest first (the desk follows them: web/views/siblings.py)."""
        return await self._table.updated_since(moment, SERVER_ID_KEY, self._server_id)

    async def home_elsewhere(self, context_id: str) -> str | None:
        """The URL of the other server that ran the context's latest task, which holds
        its worktree; None when that is this server, or nobody."""
        if not self._asks(context_id):
            return None
        found = await self._table.last_runner(context_id, SERVER_ID_KEY, SERVER_URL_KEY)
        if found is None or found[0] == self._server_id:
            return None
        return found[1] or None


class CoalescingTaskStore(TaskStore):
    def __init__(
        self,
        table: TaskTable,
        sdk: SdkStores,
        server: tuple[str, str] = ("", ""),
        on_change: Callable[[Task], None] | None = None,
        shared: bool = False,
        on_save: Callable[[Task, str], None] | None = None,
        keeping: TaskKeeping | None = None,
    ) -> None:
        self._table = table
        self._keeping = keeping  # makes room for a person's new task, or refuses it
        # a2a-sdk's own store, for the paged and filtered ListTasks.
        self._sdk = sdk
        # Other servers may run tasks in this store (so contexts are checked across them).
        self._shared = shared
        # (id, URL) of this server, stamped on every task it runs (see SERVER_ID_KEY).
        self._server_id, self._server_url = server
        # Told of every state change (push notifications); must not block.
        self._on_change = on_change
        # Told of every save, with the owner (the web page's live views); must not block.
        self._on_save = on_save
        # task id -> (owner, latest snapshot): the tasks of this process not yet final.
        self._held: dict[str, tuple[str, Task]] = {}
        self._released = asyncio.Event()  # set whenever a task is let go (see settled())
        # Ids this process just minted for new tasks: nothing can be stored under them yet.
        self.minted = MintedIds()
        self.contexts = ContextRunners(table, self._server_id, shared, self.minted)
        self._dirty: set[str] = set()
        self._writer: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()

    async def _owner(self, task_id: str, context: ServerCallContext) -> str | None:
        """Whose task this is, as the request's owner scope reaches it: its own, or
        anyone's for a scope of everyone's."""
        scope = owner_scope(context)
        held = self._held.get(task_id)
        stored = held[0] if held is not None else None
        if not scope.everyone:
            return scope.owner if stored in (None, scope.owner) else None
        if stored is None and task_id not in self.minted:
            stored = await self._table.owner_of(task_id)
        return stored or scope.owner

    async def _write(
        self,
        task: Task,
        owner: str,
        *,
        if_latest: bool = False,
        shown: dict[str, Any] | None = None,
    ) -> bool:
        """Writes a snapshot (`shown`: its rendering, if made); with `if_latest`, only
        while it is still the latest one held (a deferred write waiting for the lock
        must not land after a newer, immediate one: the task would go back to an older
        state)."""
        async with self._write_lock:
            if if_latest:
                held = self._held.get(task.id)
                if held is None or held[1] is not task:
                    return False
            await self._table.save(task, owner, shown)
            return True

    async def save(self, task: Task, context: ServerCallContext) -> None:
        # A task keeps the owner that created it, even when an admin answers it.
        held = self._held.get(task.id)
        changed = held is None or held[1].status.state != task.status.state
        if changed:
            TASK_STATES.labels(
                TaskState.Name(task.status.state).removeprefix("TASK_STATE_").lower()
            ).inc()
        if held is not None:
            owner = held[0]
        else:
            owner = await self._owner(task.id, context) or resolve_user_scope(context)
        if held is None and _is_new(task, self.minted):
            # One new task of a person at a time, from making room for it (or StoreFull,
            # which fails the request: nothing is held) until it is held and written.
            async with _admitting(self._keeping, owner, self.held):
                # On the SDK's own task, which it saves whole each time: every later save,
                # and the task a caller gets back, keep it.
                task.metadata.update({STARTED_AT_KEY: _now()})
                await self._hold(task, context, owner, first=True, changed=changed)
            return
        await self._hold(task, context, owner, first=held is None, changed=changed)

    async def _hold(
        self, task: Task, context: ServerCallContext, owner: str, *, first: bool, changed: bool
    ) -> None:
        """Holds the task's latest snapshot, and writes it now or soon (see save)."""
        snapshot = Task()
        snapshot.CopyFrom(task)
        if self._server_id:
            snapshot.metadata.update(
                {SERVER_ID_KEY: self._server_id, SERVER_URL_KEY: self._server_url}
            )
        # A new task whose request will show it to nobody before it is final or waiting
        # (see UNSEEN_UNTIL_SETTLED) needs no write before then: one write, not two.
        unseen = first and task.id in self.minted and context.state.get(UNSEEN_UNTIL_SETTLED)
        self.minted.discard(task.id)
        self._held[task.id] = (owner, snapshot)
        if changed:
            self._changed(snapshot)
        if self._on_save is not None:
            self._on_save(snapshot, owner)
        if (first and not unseen) or task.status.state not in _DEFERRABLE:
            self._dirty.discard(task.id)
            try:
                shown = None
                if context.state.get(UNSEEN_UNTIL_SETTLED):  # a failed rendering fails the write
                    shown = MessageToDict(snapshot)
                    context.state[ANSWER_KEY] = _answer(task, shown, bool(self._server_id))
                await self._write(snapshot, owner, shown=shown)
            except Exception as exc:
                if first:  # nothing stored: the request fails as a whole
                    self._held.pop(task.id, None)
                    raise
                # The turn goes on; this process keeps the state and writes it once the
                # database answers again.
                log.warning("task %s: the store refused its %s state (%s); retrying",
                            task.id, TaskState.Name(task.status.state), exc)  # fmt: skip
                self._defer(task.id)
                return
            if task.status.state not in UNFINISHED_STATES:
                self._let_go(task.id)
            return
        self._defer(task.id)

    def _let_go(self, task_id: str) -> None:
        """A task's final state is written: this process holds it no more."""
        self._held.pop(task_id, None)
        self._released.set()

    def _defer(self, task_id: str) -> None:
        self._dirty.add(task_id)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_dirty(), name="task-store-writer")

    @property
    def shared(self) -> bool:
        """Other servers read this store (a shared PostgreSQL)."""
        return self._shared

    def held(self) -> dict[str, str]:
        """The unfinished tasks this process runs, with their owners."""
        return {task_id: owner for task_id, (owner, _) in self._held.items()}

    def runs_elsewhere(self, task: Task) -> str | None:
        """For an unfinished task that another server sharing the store runs: its URL."""
        if task.id in self._held or task.status.state not in UNFINISHED_STATES:
            return None
        runner = task.metadata.fields.get(SERVER_ID_KEY)
        if runner is None or runner.string_value in ("", self._server_id):
            return None
        url = task.metadata.fields.get(SERVER_URL_KEY)
        return url.string_value if url is not None else "another server"

    def _changed(self, task: Task) -> None:
        # Stored snapshots are never changed in place, so the listener may keep this one.
        if self._on_change is not None:
            self._on_change(task)

    async def _write_dirty(self, delay: float = WRITE_DELAY, retry: bool = True) -> None:
        """Writes the deferred saves, the latest snapshot of each. While the database
        refuses them, tries again every RETRY_DELAY (`retry`), or gives up (at stop).
        A task leaves the dirty set only once written, so cancelling this is safe."""
        # Waiting a moment lets a burst of updates (or the turn's own end, which is
        # written at once) supersede most of them.
        await asyncio.sleep(delay)
        while self._dirty:
            refused = False
            for task_id in list(self._dirty):
                held = self._held.get(task_id)
                if held is None:
                    self._dirty.discard(task_id)
                    continue
                try:
                    await self._write(held[1], held[0], if_latest=True)
                except Exception:
                    if retry:
                        refused = True
                        break
                    log.exception("task %s: its last state could not be written", task_id)
                    self._dirty.discard(task_id)
                    continue
                if self._held.get(task_id) is held:  # else a newer snapshot waits
                    self._dirty.discard(task_id)
                    if held[1].status.state not in UNFINISHED_STATES:
                        self._let_go(task_id)
            if refused:
                await asyncio.sleep(RETRY_DELAY)

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        if task_id in self.minted:
            return None
        owner = await self._owner(task_id, context)
        if owner is None:
            return None
        held = self._held.get(task_id)
        if held is not None:
            copy = Task()
            copy.CopyFrom(held[1])
            return copy
        return await self._table.get(task_id, owner)

    async def flush(self, final: bool = False) -> None:
        """Writes the deferred saves. Before a read it waits at most FLUSH_WAIT (the
        database may be down); at stop (`final`) it tries each once more and gives up."""
        writer = self._writer
        if not final:
            if writer is not None and not writer.done():
                await asyncio.wait({writer}, timeout=FLUSH_WAIT)
            return
        if writer is not None and not writer.done():
            writer.cancel()
            with contextlib.suppress(BaseException):
                await writer
        await self._write_dirty(delay=0, retry=False)

    async def settled(self, task_ids: list[str]) -> None:
        """Waits until each task's final state is written: the SDK saves events on a
        task of its own, and its shutdown cancels whatever it has not saved yet.
        Callers bound the wait."""
        while any(task_id in self._held for task_id in task_ids):
            self._released.clear()
            await self._released.wait()

    async def close_held(self, message: str, keep: Callable[[Task], bool]) -> list[str]:
        """Writes every task this process holds unfinished as failed, saying why, but
        those `keep` says the next start takes back (the final flush writes them as they
        are); returns the ids of those it ended. A paused task the next start could not
        take back (input-required with no question to ask again) is ended now, not left
        for that start to find."""
        closed: list[str] = []
        for task_id, (owner, snapshot) in list(self._held.items()):
            if snapshot.status.state not in UNFINISHED_STATES or keep(snapshot):
                continue  # a task waiting for an answer waits on across the restart
            failed = Task()
            failed.CopyFrom(snapshot)
            mark_failed(failed, message, "server_stopped")
            self._dirty.discard(task_id)
            await self._write(failed, owner)
            self._changed(failed)
            if self._on_save is not None:
                self._on_save(failed, owner)
            self._held.pop(task_id, None)
            closed.append(task_id)
        return closed

    async def with_owner(self, task_id: str) -> tuple[Task, str] | None:
        """A task and its owner, whoever that is: for views that check access first."""
        held = self._held.get(task_id)
        if held is not None:
            return held[1], held[0]
        owner = None if task_id in self.minted else await self._table.owner_of(task_id)
        if owner is None:
            return None
        task = await self._table.get(task_id, owner)
        return (task, owner) if task is not None else None

    async def recent(
        self, owner: str | None, limit: int, before: Position | None = None
    ) -> list[tuple[Task, str]]:
        """The latest tasks with their owners, newest first: one owner's, or everyone's
        (None, for an admin); with `before`, those older than that position (the next
        page: a position, unlike an offset, does not shift as new tasks arrive). Tasks
        this process runs are read from memory."""
        await self.flush()
        stored = await self._table.recent(owner, limit, before)
        found = {task.id: (task, task_owner) for task, task_owner in stored}
        for task_id, (held_owner, snapshot) in self._held.items():
            if owner in (None, held_owner) and (before is None or position(snapshot) < before):
                found[task_id] = (snapshot, held_owner)
        ordered = sorted(found.values(), key=lambda pair: position(pair[0]), reverse=True)
        return ordered[:limit]

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        await self.flush()
        return await (await self._sdk.tasks()).list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        self._held.pop(task_id, None)
        self._dirty.discard(task_id)
        await self._table.delete(task_id, resolve_user_scope(context))


def _admitting(
    keeping: TaskKeeping | None, owner: str, held: Callable[[], Mapping[str, str]]
) -> contextlib.AbstractAsyncContextManager[None]:
    return contextlib.nullcontext() if keeping is None else keeping.admitting(owner, held)


def _answer(task: Task, shown: dict[str, Any], stamped: bool) -> tuple[Task, dict[str, Any]]:
    """The task as the SDK holds it now, and the snapshot's rendering less what only the
    snapshot carries (the server's id and URL, when `stamped`)."""
    held = Task()
    held.CopyFrom(task)
    metadata = shown.get("metadata")
    if stamped and isinstance(metadata, dict):
        kept = {k: v for k, v in metadata.items() if k not in (SERVER_ID_KEY, SERVER_URL_KEY)}
        shown = {**shown, "metadata": kept}
    return held, shown


def _is_new(task: Task, minted: MintedIds) -> bool:
    """A task's first save, of a task made now (not one taken back after a restart)."""
    return STARTED_AT_KEY not in task.metadata.fields and (
        task.id in minted or task.status.state == TaskState.TASK_STATE_SUBMITTED
    )


def position(task: Task) -> Position:
    """Where a task sorts in `recent`: its last update (microseconds), then its id."""
    updated = task.status.timestamp.ToMicroseconds() if task.status.HasField("timestamp") else 0
    return updated, task.id


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
