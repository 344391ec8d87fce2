"""Box A's wire side of a hand-off: the Delegator, against a real peer server.

Two real servers on loopback play devbox-1 (A) and devbox-2 (B) (tests/two_boxes.py);
B lets devbox-1 hand work here for alice. The Delegator runs
in the test with A's state dir (A's card key, A's JWKS URL): B checks each hop against
the JWKS A serves, as it would on a tailnet.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import Task
from google.protobuf.json_format import ParseDict

from tailagent.agents.events import (
    AgentEvent,
    Answer,
    DelegationFailed,
    PermissionAsked,
    PermissionDecision,
    Prompting,
)
from tailagent.card.verify import KnownAgents
from tailagent.config import DelegationSettings, Settings
from tailagent.cost.ledger import Usage
from tailagent.delegation.directory import PeerDirectory
from tailagent.delegation.outbound import DelegatorFactory, TurnIdentity
from tailagent.store.database import open_database
from tailagent.store.delegations import DelegationLinks
from tailagent.tailnet.localapi import LocalAPI
from tests.a2a_helpers import state_name
from tests.two_boxes import A_NODE, ALICE, B_NODE, Boxes, start_boxes


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Boxes]:
    made = start_boxes(tmp_path_factory.mktemp("wire"))
    yield made
    made.stop()


class Person:
    """alice on box A: what she is asked, what she answers."""

    def __init__(self, answer: Answer | None = None) -> None:
        self.asked: list[Prompting] = []
        self.told: list[AgentEvent] = []
        self.answer = answer or PermissionDecision(True, "allow_once", answerer=ALICE)
        self.before_answer: Any = None

    async def ask(self, prompt: Prompting, closed: Awaitable[object] | None = None) -> Answer:
        """Answers at once (the peer closing the question meanwhile is not watched)."""
        if closed is not None:
            closed.close()  # type: ignore[attr-defined]  # a coroutine never awaited
        self.asked.append(prompt)
        if self.before_answer is not None and len(self.asked) == 2:
            await asyncio.to_thread(self.before_answer)
        return self.answer

    async def notify(self, event: AgentEvent) -> None:
        self.told.append(event)


@pytest.fixture
async def factory(pair: Boxes, tmp_path: Path) -> AsyncIterator[DelegatorFactory]:
    settings = Settings(
        state_dir=pair.a.state_dir,
        public_url=f"http://{A_NODE}",
        delegation=DelegationSettings(proxy=pair.proxy.url, scheme="http", port=80),
    )
    localapi = LocalAPI.tailscaled(pair.fakes[0].socket)
    known = KnownAgents(tmp_path / "known.json")
    directory = PeerDirectory(localapi, known, scheme="http", port=80, proxy=pair.proxy.url)
    database = open_database(f"sqlite+aiosqlite:///{tmp_path / 'a.db'}")
    links, usage = DelegationLinks(database), Usage(database)
    await links.initialize()
    await usage.initialize()
    yield DelegatorFactory(settings, directory, links, usage, localapi)
    await localapi.aclose()
    await database.aclose()


def turn(task: str) -> TurnIdentity:
    return TurnIdentity(task, f"ctx-{task}", f"user:{ALICE}", ALICE, "laptop")


async def peer_task(pair: Boxes, task_id: str) -> Task:
    """B's task as its owner (B's local admin) reads it, on B's own listener: the card's
    URL names devbox-2.tail.test, which only the proxy resolves."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {pair.b.token}"}
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(pair.b.url, json=body, headers=headers)
    response.raise_for_status()
    return ParseDict(response.json()["result"], Task(), ignore_unknown_fields=True)


async def test_delegate_returns_the_peers_answer_asked_first(
    pair: Boxes, factory: DelegatorFactory
) -> None:
    alice = Person()
    delegator = factory.for_turn(turn("t1"), alice.ask, alice.notify)
    answer = await delegator.delegate("devbox-2", "hello from A cost:0.25")
    assert answer == "echo: hello from A cost:0.25"
    hand = alice.asked[0]
    assert isinstance(hand, PermissionAsked) and hand.tool == "delegate"
    assert hand.title == "Hand to devbox-2: hello from A cost:0.25"
    assert hand.input == {"peer": "devbox-2", "message": "hello from A cost:0.25"}
    (link,) = await factory.links.of_task("t1")
    assert link.peer_url == f"http://{B_NODE}"
    assert await factory.usage.delegated(f"user:{ALICE}") == pytest.approx(0.25)
    # A follow-up in the same conversation continues the peer's conversation.
    again = factory.for_turn(turn("t1"), alice.ask, alice.notify)
    await again.delegate("devbox-2", "and again")
    first, second = await factory.links.of_task("t1")
    assert second.peer_context_id == first.peer_context_id


async def test_peer_question_is_asked_here_and_answered_there(
    pair: Boxes, factory: DelegatorFactory
) -> None:
    alice = Person()
    delegator = factory.for_turn(turn("t2"), alice.ask, alice.notify)
    answer = await delegator.delegate("devbox-2", "ask:build please")
    _, relayed = alice.asked
    assert isinstance(relayed, PermissionAsked)
    assert relayed.title == "devbox-2's agent asks to run `rm -rf build`"
    assert [o.id for o in relayed.options] == ["allow_once", "reject_once"]
    assert relayed.input == {"command": "rm -rf build"}
    assert answer.startswith("echo: ask:build please")
    (link,) = await factory.links.of_task("t2")
    task = await peer_task(pair, link.peer_task_id)
    assert state_name_of(task) == "completed"


async def test_peer_failure_comes_back_with_its_reason(
    pair: Boxes, factory: DelegatorFactory
) -> None:
    alice = Person()
    delegator = factory.for_turn(turn("t3"), alice.ask, alice.notify)
    with pytest.raises(DelegationFailed, match="devbox-2's task failed: boom"):
        await delegator.delegate("devbox-2", "boom")


async def test_declined_hand_off_sends_nothing(pair: Boxes, factory: DelegatorFactory) -> None:
    alice = Person(PermissionDecision(False, "reject_once", answerer=ALICE))
    delegator = factory.for_turn(turn("t4"), alice.ask, alice.notify)
    with pytest.raises(DelegationFailed, match="the person declined"):
        await delegator.delegate("devbox-2", "hello")
    assert await factory.links.of_task("t4") == []


async def test_cancel_cancels_the_peers_task(pair: Boxes, factory: DelegatorFactory) -> None:
    alice = Person()
    delegator = factory.for_turn(turn("t5"), alice.ask, alice.notify)
    running = asyncio.create_task(delegator.delegate("devbox-2", "slow 30"))
    for _ in range(400):
        if await factory.links.of_task("t5"):
            break
        await asyncio.sleep(0.05)
    await delegator.cancel()
    with pytest.raises(DelegationFailed, match="canceled"):
        await asyncio.wait_for(running, 20)
    (link,) = await factory.links.of_task("t5")
    assert state_name_of(await peer_task(pair, link.peer_task_id)) == "canceled"


async def test_answer_goes_through_when_the_peer_restarted(
    pair: Boxes, factory: DelegatorFactory
) -> None:
    """B dies while its question waits here; alice answers while it is down, and the
    answer reaches B once it is back (its waiting task kept across the restart)."""
    restarting = threading.Thread(target=pair.restart_b)

    def kill_b() -> None:
        pair.b.stop(signal.SIGKILL)
        restarting.start()

    alice = Person()
    alice.before_answer = kill_b
    delegator = factory.for_turn(turn("t6"), alice.ask, alice.notify)
    answer = await asyncio.wait_for(delegator.delegate("devbox-2", "ask:dist go"), 150)
    await asyncio.to_thread(restarting.join)
    # B took the answer back after its restart as issue 22 does: the reloaded agent gets it
    # as a new message, naming who allowed it (alice, through A).
    assert "alice@example.com from laptop allowed it" in answer
    assert len(alice.asked) == 2  # the answer was sent again, not asked again
    assert any("does not answer" in getattr(e, "text", "") for e in alice.told)


async def test_hand_offs_read_the_peers_card_again_only_after_a_failure(
    pair: Boxes, factory: DelegatorFactory
) -> None:
    """A second hand-off to B within the directory's 30 s reuses B's card, so B's log
    shows no new card request; one after a failed hand-off reads it again."""

    def card_reads() -> int:
        return pair.b.log_path.read_text().count("GET /.well-known/agent-card.json")

    alice = Person()
    delegator = factory.for_turn(turn("t7"), alice.ask, alice.notify)
    await delegator.delegate("devbox-2", "one")
    before = card_reads()
    assert await delegator.delegate("devbox-2", "two") == "echo: two"
    assert card_reads() == before
    with pytest.raises(DelegationFailed, match="boom"):
        await delegator.delegate("devbox-2", "boom")
    assert await delegator.delegate("devbox-2", "three") == "echo: three"
    assert card_reads() == before + 1


def state_name_of(task: Task) -> str:
    return state_name(task.status.state)


async def test_the_consent_names_the_peer_conversation_the_work_goes_into(
    pair: Boxes, factory: DelegatorFactory
) -> None:
    """Named by the agent, a peer conversation is named to the person: its short id, and
    the title of what this conversation last handed there, when it did."""
    alice = Person()
    delegator = factory.for_turn(turn("t8"), alice.ask, alice.notify)
    await delegator.delegate("devbox-2", "tidy the build\nthen say so")
    (link,) = await factory.links.of_task("t8")
    there = link.peer_context_id
    assert await delegator.delegate("devbox-2", "and the docs", there) == "echo: and the docs"
    hand = alice.asked[-1]
    assert isinstance(hand, PermissionAsked)
    assert hand.title == (
        f"Hand to devbox-2, in its conversation {there[:8]} (last: 'tidy the build'): and the docs"
    )
    assert hand.input == {"peer": "devbox-2", "message": "and the docs", "conversation": there}
    # Another conversation of hers on A names it too, but knows nothing of what it holds.
    other = factory.for_turn(turn("t9"), alice.ask, alice.notify)
    await other.delegate("devbox-2", "one more", there)
    assert (
        alice.asked[-1].title
        == (  # type: ignore[union-attr]
            f"Hand to devbox-2, continuing an existing conversation on devbox-2 ({there[:8]}): "
            "one more"
        )
    )
    (second,) = await factory.links.of_task("t9")
    assert second.peer_context_id == there


async def test_a_peer_conversation_that_is_not_the_persons_is_refused_by_the_peer(
    pair: Boxes, factory: DelegatorFactory
) -> None:
    """A conversation B's owner started on B, named by alice's agent: B refuses it."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "owners-own", "role": "ROLE_USER", "parts": [{"text": "mine"}]}}}  # fmt: skip
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {pair.b.token}"}
    async with httpx.AsyncClient(timeout=30) as http:
        owners = (await http.post(pair.b.url, json=body, headers=headers)).json()["result"]
    alice = Person()
    delegator = factory.for_turn(turn("t10"), alice.ask, alice.notify)
    theirs = owners["task"]["contextId"]
    with pytest.raises(DelegationFailed) as refused:
        await delegator.delegate("devbox-2", "read it", theirs)
    # B's words, as for a conversation that does not exist: nothing said of its owner.
    assert str(refused.value).startswith(f"devbox-2 refused: Conversation {theirs} not found")
    assert await factory.links.of_task("t10") == []
