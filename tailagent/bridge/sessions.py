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


class ContextBusy(Exception):
    def __init__(self, context_id: str, task_id: str) -> None:
        super().__init__(
            f"Context {context_id} is busy with task {task_id}; answer or cancel that task, "
            "or start a new context."
        )
        self.task_id = task_id


class SessionPool:
    def __init__(self, backend: AgentBackend, session_map: SessionMap) -> None:
        self._backend = backend
        self._map = session_map
        self._sessions: dict[str, AgentSession] = {}
        self._holders: dict[str, str] = {}
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

    def release(self, context_id: str, task_id: str) -> None:
        if self._holders.get(context_id) == task_id:
            del self._holders[context_id]

    async def discard(self, context_id: str) -> None:
        """Drops a session that failed; the context's next turn opens a fresh one."""
        session = self._sessions.pop(context_id, None)
        self._holders.pop(context_id, None)
        if session is not None:
            try:
                await session.close()
            except Exception:
                log.exception("closing a failed session of context %s", context_id)

    async def aclose(self) -> None:
        for context_id in list(self._sessions):
            await self.discard(context_id)
