"""Which agent session serves which A2A context, and which task holds it now.

A context keeps one agent session across its tasks, so a follow-up turn reaches
the same conversation. An agent session runs one turn at a time, so a context
is lent to one task at a time.
"""

from __future__ import annotations

import asyncio
import logging

from tailagent.agents.events import AgentBackend, AgentSession
from tailagent.bridge.state import MintedIds, SessionMap

log = logging.getLogger(__name__)

# Sessions kept open with no task on them. Echo sessions are tiny; the agent
# processes of later backends will make this a setting.
MAX_IDLE_SESSIONS = 64


class ContextBusy(Exception):
    def __init__(self, context_id: str, task_id: str) -> None:
        super().__init__(
            f"Context {context_id} is busy with task {task_id}; answer or cancel that task, "
            "or start a new context."
        )


class SessionPool:
    def __init__(
        self, backend: AgentBackend, session_map: SessionMap, max_idle: int = MAX_IDLE_SESSIONS
    ) -> None:
        self._backend = backend
        self._map = session_map
        self._max_idle = max_idle
        self._sessions: dict[str, AgentSession] = {}
        self._holders: dict[str, str] = {}
        # Contexts whose session no task holds, least recently used first.
        self._idle: dict[str, None] = {}
        self._lock = asyncio.Lock()

    @property
    def minted_contexts(self) -> MintedIds:
        return self._map.minted

    def holder(self, context_id: str) -> str | None:
        """The task that holds this context's session, if any."""
        return self._holders.get(context_id)

    async def acquire(self, context_id: str, task_id: str) -> tuple[AgentSession, bool]:
        """The context's session, lent to `task_id`; True when it was resumed from disk."""
        async with self._lock:
            holder = self._holders.get(context_id)
            if holder is not None and holder != task_id:
                raise ContextBusy(context_id, holder)
            self._holders[context_id] = task_id
            self._idle.pop(context_id, None)
            session = self._sessions.get(context_id)
            if session is not None:
                return session, False
            try:
                resume_id = await self._map.get(context_id, self._backend.name)
                session = await self._backend.open_session(resume_id)
            except BaseException:
                del self._holders[context_id]
                raise
            self._sessions[context_id] = session
            if session.session_id != resume_id:
                await self._map.put(context_id, self._backend.name, session.session_id)
            return session, resume_id is not None

    async def release(self, context_id: str, task_id: str) -> None:
        """Returns the session to the pool; past `max_idle` idle sessions the least
        recently used is closed (its context resumes it from the session map)."""
        if self._holders.get(context_id) != task_id:
            return
        del self._holders[context_id]
        if context_id in self._sessions:
            self._idle[context_id] = None
        while len(self._idle) > self._max_idle:
            oldest = next(iter(self._idle))
            del self._idle[oldest]
            await self._close(oldest)

    async def discard(self, context_id: str) -> None:
        """Drops a session that failed; the context's next turn opens a fresh one."""
        self._holders.pop(context_id, None)
        self._idle.pop(context_id, None)
        await self._close(context_id)

    async def _close(self, context_id: str) -> None:
        session = self._sessions.pop(context_id, None)
        if session is not None:
            try:
                await session.close()
            except Exception:
                log.exception("closing the session of context %s", context_id)

    async def aclose(self) -> None:
        for context_id in list(self._sessions):
            await self.discard(context_id)
