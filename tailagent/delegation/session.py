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
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, replace
from typing import Any

from tailagent.agents.events import (
    AgentEvent,
    AgentSession,
    Answer,
    DelegationFailed,
    Prompting,
    PromptPart,
    PromptText,
    PromptWithdrawn,
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
# The request ids of the prompts this wrapper puts into a turn: a task a restart left
# waiting on one waits on a hand-off (bridge/turns/restore.py).
DELEGATED = "delegate-"


class DelegatingSession:
    """An AgentSession whose turns get tools to hand work to other tailagents."""

    def __init__(self, inner: AgentSession, factory: DelegatorFactory, turn: TurnIdentity) -> None:
        self._inner = inner
        self._factory = factory
        self._turn = turn
        self._asked: dict[str, asyncio.Future[Answer]] = {}
        self._delegator: Delegator | None = None
        self._leave_peers = False
        self._shown: set[str] = set()  # the asked prompts the bridge was given
        self._withdraw = factory.withdraw
        self._taking_back: set[asyncio.Task[None]] = set()

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

    def prompt(
        self, parts: list[PromptPart], options: TurnOptions | None = None
    ) -> AsyncIterator[AgentEvent]:
        async def body(delegator: Delegator, merged: _Merged) -> None:
            turn_options = replace(options or TurnOptions(), tools=delegator)
            await _feed(self._inner.prompt(parts, turn_options), merged)

        return self._run(body)  # itself, so that closing the turn closes it at once

    def resume(self, waiting: Prompting) -> AsyncIterator[AgentEvent]:
        """The turn of a task a previous run of this box left waiting on a peer's prompt
        (`waiting`, shown here under one of this wrapper's request ids): the person's
        answer, when `answer` gets it, goes on to the peer's task (Delegator.resume),
        the peer's further questions are asked in this turn as usual, and once the
        peer's task is over the agent's reloaded session is told how it ended, as a new
        prompt (its own turn having ended with the restart). The answer's slot is
        taken now, before the bridge can answer."""
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._asked[waiting.request_id] = future

        async def body(delegator: Delegator, merged: _Merged) -> None:
            answer = await future
            self._asked.pop(waiting.request_id, None)
            try:
                peer, said = await delegator.resume(answer)
                told = f"{peer} finished: {said}"
            except DelegationFailed as exc:
                told = f"The hand-off failed: {exc}"
            intro = (
                "While you waited for the peer you handed work to, tailagent restarted, so "
                "its outcome comes as a new message. "
            )
            text = f"{intro}{told}"
            await _feed(
                self._inner.prompt([PromptText(text)], TurnOptions(tools=delegator)), merged
            )

        return self._run(body)

    async def _run(
        self, body: Callable[[Delegator, _Merged], Coroutine[Any, Any, None]]
    ) -> AsyncIterator[AgentEvent]:
        """A turn whose events `body` puts into the merged stream, beside the Delegator's
        (progress, the person asked), read here until the turn ends."""
        merged: _Merged = asyncio.Queue()

        async def ask(prompt: Prompting, closed: Awaitable[object] | None) -> Answer:
            request_id = f"{DELEGATED}{uuid.uuid4().hex}"
            future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
            self._asked[request_id] = future  # before the bridge can see (and answer) it
            await merged.put(replace(prompt, request_id=request_id))
            watch = asyncio.ensure_future(self._withdraw_when(closed, request_id))
            try:
                return await future
            finally:
                watch.cancel()
                self._asked.pop(request_id, None)
                self._shown.discard(request_id)

        async def notify(event: AgentEvent) -> None:
            await merged.put(event)

        delegator = self._factory.for_turn(self._turn, ask, notify)
        if self._leave_peers:
            delegator.leave_peers()
        self._delegator = delegator
        runner = asyncio.create_task(body(delegator, merged), name=f"turn-{self._turn.task_id}")
        runner.add_done_callback(lambda done: _failed(done, merged))
        try:
            while True:
                item = await merged.get()
                if isinstance(item, _Ended):
                    if item.error is not None:
                        raise item.error
                    return
                if isinstance(item, Prompting) and item.request_id in self._asked:
                    if self._asked[item.request_id].done():
                        continue  # withdrawn before the turn showed it
                    self._shown.add(item.request_id)
                yield item
                if isinstance(item, TurnDone | TurnFailed):
                    return
        finally:
            await self._end(runner, delegator)

    async def _withdraw_when(self, closed: Awaitable[object] | None, request_id: str) -> None:
        """Once `closed` ends, the question `request_id` is taken back from the person:
        through the bridge (`withdraw`, which settles it as any answer is, so an answer
        racing it is refused or wins whole), or here while the turn has not shown it."""
        if closed is None:
            return
        await closed
        future = self._asked.get(request_id)
        if future is None or future.done():
            return
        if request_id not in self._shown or self._withdraw is None:
            future.set_exception(PromptWithdrawn(request_id))
            return
        # Its own task: the withdrawal ends this ask, whose end cancels this watch.
        taking = asyncio.create_task(self._withdraw(self._turn, request_id))
        self._taking_back.add(taking)
        taking.add_done_callback(self._taking_back.discard)

    def withdrawn(self, request_id: str) -> None:
        """The bridge settled the question `request_id` as withdrawn: its ask ends."""
        future = self._asked.get(request_id)
        if future is not None and not future.done():
            future.set_exception(PromptWithdrawn(request_id))

    def leave_peers(self) -> None:
        """The server stops while the turn waits on a peer's prompt: the peer's task is
        left waiting too, as this task is (the link store keeps it), for the answer the
        next start relays (`resume`); ending the turn then cancels no peer task."""
        self._leave_peers = True
        if self._delegator is not None:
            self._delegator.leave_peers()

    async def _end(self, runner: asyncio.Task[None], delegator: Delegator) -> None:
        """The turn is over (or its reader gone): its questions are refused, the peer
        tasks it started and still runs are cancelled, the agent's stream is closed."""
        self._refuse_asked("the turn ended")
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        if not self._leave_peers:
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
        if self._delegator is not None and not self._leave_peers:
            with contextlib.suppress(Exception):
                await self._delegator.cancel()
        await self._inner.cancel()

    async def close(self) -> None:
        await self._inner.close()


def _failed(runner: asyncio.Task[None], merged: _Merged) -> None:
    """A turn's body that broke outside the agent's stream (the answer refused, the
    relay's own error) ends the turn as the agent's error would."""
    if not runner.cancelled() and (error := runner.exception()) is not None:
        merged.put_nowait(_Ended(error if isinstance(error, Exception) else None))


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
