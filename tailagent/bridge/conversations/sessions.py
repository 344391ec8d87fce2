"""Which agent session serves which A2A context, and which task holds it now.

A context keeps one agent session across its tasks, so a follow-up turn reaches
the same conversation without a new process or handshake. An agent session runs
one turn at a time, so a context is lent to one task at a time. Sessions with no
task are idle: the least recently used go first when the pool is full, and any
idle past `idle_timeout` are closed; their contexts come back from the session
map on their next turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

from tailagent.agents.events import AgentBackend, AgentSession
from tailagent.store.session_map import SessionMap
from tailagent.store.tasks import MintedIds

log = logging.getLogger(__name__)

# Idle sessions kept when the backend sets no cap of its own (echo sessions are tiny).
MAX_IDLE_SESSIONS = 64


class ContextBusy(Exception):
    """A context lent to another task. The task is named only to those who may read it
    (None: an unnamed task), so a refusal never hands out another person's task id."""

    def __init__(self, context_id: str, task_id: str | None) -> None:
        task = f"task {task_id}" if task_id else "another task"
        self.running = f"conversation {context_id} is running {task}"
        super().__init__(
            f"Context {context_id} is busy with {task}; answer or cancel that task, "
            "or start a new context."
        )


class PoolFull(Exception):
    def __init__(self, limit: int, message: str = "") -> None:
        super().__init__(
            message
            or f"All {limit} agent processes are busy (agent.max_processes); try again when "
            "a task finishes, or cancel one."
        )


class ShareFull(PoolFull):
    """A caller's tasks hold its whole share of the processes: the rest stay free for
    everyone else, however many tasks this caller leaves waiting for an answer."""

    def __init__(self, caller: str, share: int, limit: int) -> None:
        super().__init__(
            limit,
            f"{caller} already holds {share} of the {limit} agent processes, the most one "
            f"caller may (agent.max_processes_per_caller = {share}): cancel one of its "
            "tasks, or answer one that waits so it can finish, then try again.",
        )


def default_share(max_processes: int) -> int:
    """Half the processes, rounded up: whoever fills their share leaves the other half
    (all but one process when there are only two or three)."""
    return max(1, -(-max_processes // 2))


class SessionPool:
    def __init__(
        self,
        backend: AgentBackend,
        session_map: SessionMap,
        idle_timeout: float | None = None,
        per_caller: int | None = None,
    ) -> None:
        self._backend = backend
        self._map = session_map
        self._max = backend.max_sessions
        # The most processes one caller's tasks may hold (None: the default share); an
        # agent with no cap on its processes (echo) has no share either.
        self._share = None if self._max is None else per_caller or default_share(self._max)
        self._max_idle = MAX_IDLE_SESSIONS if self._max is None else self._max
        self._idle_timeout = idle_timeout
        self._sessions: dict[str, AgentSession] = {}
        self._holders: dict[str, str] = {}
        # Context -> the caller whose task holds it, for those counted against a share.
        self._holding_callers: dict[str, str] = {}
        # Contexts whose session no task holds -> when it was released, oldest first.
        self._idle: dict[str, float] = {}
        self._lock = asyncio.Lock()
        self._sweeper: asyncio.Task[None] | None = None
        # Contexts whose live session an admin switched to a mode callers may not choose:
        # a mode lasts as long as its session, so such a session serves admins only.
        self._unguarded: set[str] = set()
        # Sessions opened new (an id never seen before) whose first turn has not
        # started: nothing they cost can be in the books yet (see first_turn).
        self._opened_new: set[str] = set()
        # Contexts whose stored session is on another box (one that is gone): their next
        # session is a new one, not a resume the agent here cannot find.
        self._afresh: set[str] = set()

    @property
    def minted_contexts(self) -> MintedIds:
        return self._map.minted

    @property
    def live(self) -> int:
        return len(self._sessions)

    @property
    def caller_modes(self) -> tuple[str, ...]:
        """The modes of this pool's agent that a caller who is not admin may choose."""
        return self._backend.caller_modes

    @property
    def held(self) -> int:
        """Sessions lent to a task (running, or waiting for an answer); the others are
        idle and give way to a new conversation when the pool is full."""
        return len(self._holders)

    def holder(self, context_id: str) -> str | None:
        """The task that holds this context's session, if any."""
        return self._holders.get(context_id)

    def reserve(self, context_id: str, task_id: str) -> None:
        """Marks the context as the task's from the moment its turn starts, before its
        worktree is made and its session opened: a merge or discard asked in between
        must see the turn as running, not find the worktree idle. `acquire` lends the
        session to the same task; `release` gives the reservation back."""
        holder = self._holders.get(context_id)
        if holder is not None and holder != task_id:
            raise ContextBusy(context_id, holder)
        self._holders[context_id] = task_id

    def start_afresh(self, context_id: str) -> None:
        """The context's next session is opened new: the one the store names was the
        agent's on a box that is gone (its files are there)."""
        self._afresh.add(context_id)

    def _check_share(self, caller: str | None) -> None:
        """Refuses a caller whose tasks already hold its whole share of the processes."""
        if caller is None or self._share is None or self._max is None:
            return
        held = sum(1 for c in self._holding_callers.values() if c == caller)
        if held >= self._share:
            raise ShareFull(caller, self._share, self._max)

    def _lend(self, context_id: str, task_id: str, caller: str | None) -> None:
        self._holders[context_id] = task_id
        if caller is not None:
            self._holding_callers[context_id] = caller

    async def acquire(
        self,
        context_id: str,
        task_id: str,
        cwd: Path | None = None,
        *,
        mode: str | None = None,
        any_mode: bool = True,
        caller: str | None = None,
    ) -> tuple[AgentSession, bool]:
        """The context's session, lent to `task_id`; True when an earlier session of the
        context was reloaded into a new one. A new session works in `cwd` (the
        context's worktree), or in the workspace. The turn will ask for `mode`; a turn
        whose caller may not choose every mode (`any_mode` False) never gets a session
        left in one of the modes only admins may choose: it gets the conversation
        reloaded into a new session, in the agent's configured mode. A `caller` counts
        the session against its share (agent.max_processes_per_caller); None is not
        counted (an admin's, or a task taken back after a restart)."""
        async with self._lock:
            holder = self._holders.get(context_id)
            if holder is not None and holder != task_id:
                raise ContextBusy(context_id, holder)
            if context_id not in self._holding_callers:  # not lent yet (maybe reserved)
                self._check_share(caller)
            self._idle.pop(context_id, None)
            session = self._sessions.get(context_id)
            if session is not None and not session.alive:
                await self._close(context_id)  # crashed or killed: the next turn gets a new one
                session = None
            if session is not None and context_id in self._unguarded and not any_mode:
                log.info("context %s: its session's mode is an admin's; reloading it", context_id)
                await self._close(context_id)
                session = None
            if session is not None:
                self._lend(context_id, task_id, caller)
                self._note_mode(context_id, mode)
                return session, False
            await self._make_room()
            self._lend(context_id, task_id, caller)
            try:
                resume_id = (
                    None
                    if context_id in self._afresh
                    else await self._map.get(context_id, self._backend.name)
                )
                session = await self._backend.open_session(resume_id, cwd)
                self._afresh.discard(context_id)
            except BaseException:
                self._let_go(context_id)
                raise
            self._sessions[context_id] = session
            self._note_mode(context_id, mode)
            if session.session_id != resume_id:
                self._opened_new.add(session.session_id)
                await self._map.put(context_id, self._backend.name, session.session_id)
            self._start_sweeper()
            return session, resume_id is not None and session.session_id == resume_id

    def _note_mode(self, context_id: str, mode: str | None) -> None:
        """Remembers whether the session's mode, once the turn asks for `mode`, is one
        only admins may choose (no mode asked: it stays what it was)."""
        if mode is None:
            return
        if mode in self.caller_modes:
            self._unguarded.discard(context_id)
        else:
            self._unguarded.add(context_id)

    async def _make_room(self) -> None:
        if self._max is None or len(self._sessions) < self._max:
            return
        if not self._idle:
            raise PoolFull(self._max)
        oldest = next(iter(self._idle))
        del self._idle[oldest]
        await self._close(oldest)

    def first_turn(self, session_id: str) -> bool:
        """Whether the session was opened new for the turn now starting in it (True
        once): no cost of it, counted or running, can be in the store, so the turn's
        books need not be read or cleared for it."""
        if session_id not in self._opened_new:
            return False
        self._opened_new.discard(session_id)
        return True

    async def persist(self) -> None:
        """Writes the context -> session map now (it is written lazily otherwise): a task
        about to wait for a person must find its session again after a crash."""
        await self._map.flush()

    async def release(self, context_id: str, task_id: str) -> None:
        """Returns the session to the pool; past the idle bound the least recently used
        is closed."""
        if self._holders.get(context_id) != task_id:
            return
        self._let_go(context_id)
        if context_id in self._sessions:
            self._idle[context_id] = time.monotonic()
        while len(self._idle) > self._max_idle:
            oldest = next(iter(self._idle))
            del self._idle[oldest]
            await self._close(oldest)

    def _let_go(self, context_id: str) -> None:
        """No task holds the context's session now (nor counts it against a share)."""
        self._holders.pop(context_id, None)
        self._holding_callers.pop(context_id, None)

    def _start_sweeper(self) -> None:
        if self._idle_timeout is not None and (self._sweeper is None or self._sweeper.done()):
            self._sweeper = asyncio.create_task(self._sweep(), name="session-sweeper")

    async def _sweep(self) -> None:
        assert self._idle_timeout is not None
        interval = min(max(self._idle_timeout / 4, 0.05), 30.0)
        while self._sessions:
            await asyncio.sleep(interval)
            deadline = time.monotonic() - self._idle_timeout
            for context_id, since in list(self._idle.items()):
                if since <= deadline and self._idle.pop(context_id, None) is not None:
                    log.info("stopping the idle agent session of context %s", context_id)
                    await self._close(context_id)

    async def discard(self, context_id: str) -> None:
        """Drops a session that failed; the context's next turn opens a fresh one."""
        self._let_go(context_id)
        self._idle.pop(context_id, None)
        await self._close(context_id)

    async def _close(self, context_id: str) -> None:
        self._unguarded.discard(context_id)
        session = self._sessions.pop(context_id, None)
        if session is not None:
            self._opened_new.discard(session.session_id)
            try:
                await session.close()
            except Exception:
                log.exception("closing the session of context %s", context_id)

    async def aclose(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(BaseException):
                await self._sweeper
        await asyncio.gather(*(self._close(c) for c in list(self._sessions)))
