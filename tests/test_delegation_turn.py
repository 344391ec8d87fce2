"""Box A's turn side of a delegation: the agent's `delegate` tool call inside the
person's turn, the peer's questions asked in that same turn and answered by whoever
answered it, and nothing left running once the turn is over.

The wrapper's own behaviour (merging the agent's events with the delegator's, routing
answers, cancelling) is shown on the real echo agent with a delegator that follows the
contract of delegation/outbound.py but reaches no peer; the rest through a real server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tailagent.agents.echo import EchoSession
from tailagent.agents.events import (
    AgentEvent,
    DelegationFailed,
    JSONDict,
    Notice,
    PermissionAsked,
    PermissionDecision,
    PermissionOption,
    Progress,
    PromptText,
    Text,
    ToolFinished,
    ToolStarted,
    TurnDone,
)
from tailagent.delegation.outbound import Asker, Notify, TurnIdentity
from tailagent.delegation.session import DelegatingSession
from tests.a2a_helpers import A2A, data_parts, kind_of, texts

TURN = TurnIdentity("task-1", "ctx-1", "user:alice@example.com", "alice@example.com", "laptop")
HAND = (
    PermissionOption("allow_once", "Hand it over", "allow_once"),
    PermissionOption("reject_once", "Don't", "reject_once"),
)


class PeerDouble:
    """A Delegator as outbound.py's contract has it: asks the person, reports progress,
    waits while the peer works (until `finish` is set), answers; no network."""

    def __init__(self, ask: Asker, notify: Notify) -> None:
        self.ask, self.notify = ask, notify
        self.finish = asyncio.Event()
        self.finish.set()
        self.sent: list[tuple[str, str]] = []
        self.answerers: list[str] = []
        self.cancelled = 0

    async def list_peers(self) -> list[JSONDict]:
        return [{"name": "devbox-2"}]

    async def delegate(
        self,
        peer: str,
        message: str,
        conversation: str | None = None,
        progress: Progress | None = None,
    ) -> str:
        asked = PermissionAsked("", "delegate", {"peer": peer}, f"Hand to {peer}", options=HAND)
        answer = await self.ask(asked, None)
        if not (isinstance(answer, PermissionDecision) and answer.allow):
            raise DelegationFailed("the person declined")
        self.answerers.append(answer.answerer)
        self.sent.append((peer, message))
        await self.notify(Notice(f"{peer}: working"))
        await self.finish.wait()
        return f"{peer} did: {message.strip()}"

    async def cancel(self) -> None:
        self.cancelled += 1
        self.finish.set()


class Doubles:
    """A DelegatorFactory handing out PeerDoubles, keeping them for the test to read."""

    withdraw = None  # no request handler: nothing is taken back

    def __init__(self, finish_at_once: bool = True) -> None:
        self.made: list[PeerDouble] = []
        self.finish_at_once = finish_at_once

    def for_turn(self, turn: TurnIdentity, ask: Asker, notify: Notify) -> PeerDouble:
        assert turn == TURN
        double = PeerDouble(ask, notify)
        if not self.finish_at_once:
            double.finish.clear()
        self.made.append(double)
        return double


def wrapped(tmp_path: Path, doubles: Doubles) -> DelegatingSession:
    return DelegatingSession(EchoSession("s-1", tmp_path), doubles, TURN)  # type: ignore[arg-type]


async def until(events: AsyncIterator[AgentEvent], kind: type) -> list[AgentEvent]:
    """The events up to and with the first of `kind`."""
    seen: list[AgentEvent] = []
    async for event in events:
        seen.append(event)
        if isinstance(event, kind):
            return seen
    raise AssertionError(f"the turn ended without a {kind.__name__}: {seen}")


def turn_tasks() -> list[asyncio.Task[object]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith("turn-")]


async def test_the_peers_questions_and_the_agents_own_share_one_turn(tmp_path: Path) -> None:
    doubles = Doubles()
    session = wrapped(tmp_path, doubles)
    events = session.prompt([PromptText("ask:local delegate:devbox-2 ask question")])
    # The agent's own prompt comes first, under its own id, and goes to the agent.
    own = (await until(events, PermissionAsked))[-1]
    assert isinstance(own, PermissionAsked) and own.tool == "Bash"
    assert not own.request_id.startswith("delegate-")
    await session.answer(own.request_id, PermissionDecision(True, answerer="alice@example.com"))
    seen = await until(events, PermissionAsked)
    hand = seen[-1]
    assert isinstance(hand, PermissionAsked) and hand.title == "Hand to devbox-2"
    assert hand.request_id.startswith("delegate-")
    started = [e for e in seen if isinstance(e, ToolStarted)]
    assert [(e.name, e.title) for e in started][-1] == ("delegate", "Hand to devbox-2")
    await session.answer(hand.request_id, PermissionDecision(True, answerer="bob@example.com"))
    rest = [event async for event in events]
    double = doubles.made[0]
    # The keywords after the peer's name are the peer's: sent on, not acted out here.
    assert double.sent == [("devbox-2", "ask question")]
    assert double.answerers == ["bob@example.com"]
    assert Notice("devbox-2: working") in rest
    finished = [e for e in rest if isinstance(e, ToolFinished)]
    assert [(e.status, e.output) for e in finished] == [("completed", "devbox-2 did: ask question")]
    assert isinstance(rest[-1], TurnDone)
    assert "".join(e.text for e in rest if isinstance(e, Text)) == "devbox-2 did: ask question"
    assert turn_tasks() == []


async def test_a_declined_hand_off_fails_the_tool_call_and_the_turn_goes_on(
    tmp_path: Path,
) -> None:
    session = wrapped(tmp_path, Doubles())
    events = session.prompt([PromptText("delegate:devbox-2 build it")])
    hand = (await until(events, PermissionAsked))[-1]
    assert isinstance(hand, PermissionAsked)
    await session.answer(hand.request_id, PermissionDecision(False, reason="not now"))
    rest = [event async for event in events]
    finished = [e for e in rest if isinstance(e, ToolFinished)]
    assert [(e.status, e.output) for e in finished] == [("failed", "the person declined")]
    assert isinstance(rest[-1], TurnDone) and rest[-1].stop_reason == "end_turn"
    with pytest.raises(KeyError):  # answered once: a second answer finds nothing waiting
        await session.answer(hand.request_id, PermissionDecision(True))


async def test_cancel_reaches_the_peer_and_ends_the_turn(tmp_path: Path) -> None:
    doubles = Doubles(finish_at_once=False)
    session = wrapped(tmp_path, doubles)
    events = session.prompt([PromptText("delegate:devbox-2 slow 30")])
    hand = (await until(events, PermissionAsked))[-1]
    await session.answer(hand.request_id, PermissionDecision(True))
    await until(events, Notice)  # the peer works
    await session.cancel()
    rest = [event async for event in events]
    assert doubles.made[0].cancelled >= 1
    assert isinstance(rest[-1], TurnDone) and rest[-1].stop_reason == "cancelled"
    assert turn_tasks() == []


async def test_a_turn_closed_while_the_person_is_asked_leaves_nothing_running(
    tmp_path: Path,
) -> None:
    """A parked turn that is cancelled is closed by the bridge, not read to its end:
    the hand-off still waiting for the person is refused and the peer told."""
    doubles = Doubles()
    session = wrapped(tmp_path, doubles)
    events = session.prompt([PromptText("delegate:devbox-2 anything")])
    hand = (await until(events, PermissionAsked))[-1]
    await events.aclose()  # type: ignore[attr-defined]
    assert doubles.made[0].cancelled == 1
    assert turn_tasks() == []
    with pytest.raises(KeyError):
        await session.answer(hand.request_id, PermissionDecision(True))


async def test_delegate_without_tools_fails_saying_so(a2a: A2A) -> None:
    """A turn tailagent gave no tools (here a token's: no person to carry) cannot
    hand work on; the agent is told why and the turn completes."""
    turn = await a2a.turn("delegate:devbox-2 build it")
    assert turn.final_state == "completed"
    use, result = [s for s in turn.statuses if kind_of(s) in ("tool_use", "tool_result")]
    assert texts(use.status.message) == "Calling tool Hand to devbox-2"
    assert data_parts(use.status.message)[0]["input"] == {
        "peer": "devbox-2", "message": "build it"
    }  # fmt: skip
    assert texts(result.status.message) == "Hand to devbox-2: failed"
    why = data_parts(result.status.message)[0]["output"]
    assert why.startswith("no person's turn is running")
    answer = "".join(texts(a.artifact) for a in turn.artifacts("response"))
    assert answer == f"Could not hand to devbox-2: {why}.\n"
