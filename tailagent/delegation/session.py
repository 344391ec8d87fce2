"""A turn's agent session with the delegation tools beside it.

The agent hands work to a peer from inside its turn (a `delegate` tool call), and the
peer's progress and questions must reach the person through that same turn: the
bridge reads one stream of events and answers one session. So this wrapper runs the
agent's turn in a task of its own, merges its events with those the turn's Delegator
puts in (progress notices, "Hand to devbox-2" and the peer's questions, each under a
request id of this wrapper's), and routes each answer to whichever asked. A turn's
delegations end with it: nothing it started is left running once it is over.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

from tailagent.agents.events import (
    AgentEvent,
    AgentSession,
    Answer,
    DelegationFailed,
    Prompting,
    PromptPart,
    TurnDone,
    TurnFailed,
    TurnOptions,
)
from tailagent.delegation.outbound import Delegator, DelegatorFactory, TurnIdentity


@dataclass(frozen=True, slots=True)
class _Ended:
    """The agent's own stream ended without a result, or broke (`error`, raised again
    to the bridge as the agent's, as if it had read the agent directly)."""

    error: Exception | None = None


_Merged = asyncio.Queue[AgentEvent | _Ended]


class DelegatingSession:
    """An AgentSession whose turns get tools to hand work to other tailagents."""

    def __init__(self, inner: AgentSession, factory: DelegatorFactory, turn: TurnIdentity) -> None:
        self._inner = inner
        self._factory = factory
        self._turn = turn
        self._asked: dict[str, asyncio.Future[Answer]] = {}
        self._delegator: Delegator | None = None

    @property
    def inner(self) -> AgentSession:
        return self._inner

    @property
    def session_id(self) -> str:
        return self._inner.session_id

    @property
    def alive(self) -> bool:
        return self._inner.alive

    def __getattr__(self, name: str) -> object:
        """What else the bridge reads of a session (`reattached_with`) is the agent's."""
        return getattr(self._inner, name)

    async def prompt(
        self, parts: list[PromptPart], options: TurnOptions | None = None
    ) -> AsyncIterator[AgentEvent]:
        merged: _Merged = asyncio.Queue()

        async def ask(prompt: Prompting) -> Answer:
            request_id = f"delegate-{uuid.uuid4().hex}"
            future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
            self._asked[request_id] = future  # before the bridge can see (and answer) it
            await merged.put(replace(prompt, request_id=request_id))
            try:
                return await future
            finally:
                self._asked.pop(request_id, None)

        async def notify(event: AgentEvent) -> None:
            await merged.put(event)

        delegator = self._factory.for_turn(self._turn, ask, notify)
        self._delegator = delegator
        events = self._inner.prompt(parts, replace(options or TurnOptions(), tools=delegator))
        runner = asyncio.create_task(_feed(events, merged), name=f"turn-{self._turn.task_id}")
        try:
            while True:
                item = await merged.get()
                if isinstance(item, _Ended):
                    if item.error is not None:
                        raise item.error
                    return
                yield item
                if isinstance(item, TurnDone | TurnFailed):
                    return
        finally:
            await self._end(runner, delegator)

    async def _end(self, runner: asyncio.Task[None], delegator: Delegator) -> None:
        """The turn is over (or its reader gone): its questions are refused, the peer
        tasks it started and still runs are cancelled, the agent's stream is closed."""
        self._refuse_asked("the turn ended")
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        with contextlib.suppress(Exception):
            await delegator.cancel()
        if self._delegator is delegator:
            self._delegator = None

    def _refuse_asked(self, why: str) -> None:
        for future in self._asked.values():
            if not future.done():
                future.set_exception(DelegationFailed(why))
        self._asked.clear()

    async def answer(self, request_id: str, answer: Answer) -> None:
        future = self._asked.get(request_id)
        if future is None:
            await self._inner.answer(request_id, answer)
            return
        if future.done():
            raise KeyError(f"no pending request {request_id}")
        future.set_result(answer)

    async def cancel(self) -> None:
        """Cancels the peer's tasks and the agent's turn, which then ends as it does."""
        self._refuse_asked("the task was canceled")
        if self._delegator is not None:
            with contextlib.suppress(Exception):
                await self._delegator.cancel()
        await self._inner.cancel()

    async def close(self) -> None:
        await self._inner.close()


async def _feed(events: AsyncIterator[AgentEvent], merged: _Merged) -> None:
    """The agent's events into the merged stream, then how the stream ended."""
    try:
        async for event in events:
            await merged.put(event)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        await merged.put(_Ended(exc))
        return
    finally:
        with contextlib.suppress(Exception):
            await events.aclose()  # type: ignore[attr-defined]
    await merged.put(_Ended())
