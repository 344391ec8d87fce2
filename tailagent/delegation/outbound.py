"""The calling side of a hand-off (box A): a turn's `delegate` tool, on the wire.

An agent on this box asks for a sub-task to be run on a peer; this module makes that
a step of the person's own turn. The person is asked first (unless
`delegation.allow_peers` names the peer), the sub-task goes out as A2A with the actor
chain that says whose work it is, the peer's progress and questions come back into
this turn (its questions attributed to the peer, answered by the person as any local
one), and the answer, or the peer's reason for failing, comes back to the agent. Each
request is signed afresh, so the peer's replay window and nonce checks hold for a
relayed answer too, and each relayed answer is signed as the person who gave it.

What the wire looks like for one peer task (stream, relay, poll after a break) is in
peer_task.py; how a peer's question is shown here and answered there, in relay.py.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import AgentCard

from tailagent.agents.events import (
    AgentEvent,
    Answer,
    DelegationFailed,
    JSONDict,
    Notice,
    PermissionAsked,
    PermissionDecision,
    PermissionOption,
    Progress,
    QuestionAsked,
)
from tailagent.card.keyfile import key_version
from tailagent.card.peers import Peer
from tailagent.card.publish import JWKS_PATH
from tailagent.config import Settings
from tailagent.cost.ledger import Usage
from tailagent.delegation.chain import extend
from tailagent.delegation.directory import TTL
from tailagent.delegation.peer_task import Outcome, PeerTask
from tailagent.store.delegations import DelegationLinks
from tailagent.tailnet.localapi import LocalAPI, LocalAPIUnavailable, self_dns_name

if TYPE_CHECKING:
    from tailagent.card.keys import SigningKey

log = logging.getLogger(__name__)

# Asks the person; the second argument, when given, ends once the question is no
# longer asked where it comes from (its peer answered or closed it): the ask is then
# withdrawn here, and raises PromptWithdrawn unless an answer came first.
Asker = Callable[[PermissionAsked | QuestionAsked, Awaitable[object] | None], Awaitable[Answer]]
Notify = Callable[[AgentEvent], Awaitable[None]]
# Takes a relayed question the turn shows back from the person (turn, its request id).
Withdraw = Callable[["TurnIdentity", str], Coroutine[Any, Any, None]]
# A peer conversation as the consent names it: its id's first characters, as
# conversations are named on a box; and how much of the last title it shows.
SHORT_ID = 8
TITLE_LIMIT = 80
# How long the end of a hand-off waits for the peer to take its task's cancel.
CANCEL_TIMEOUT = 10.0
HAND_OPTIONS = (
    PermissionOption("allow_once", "Hand it over", "allow_once"),
    PermissionOption("reject_once", "Don't", "reject_once"),
)


@dataclass(frozen=True, slots=True)
class TurnIdentity:
    """Whose turn hands work over: this node's task and conversation, their owner (as
    the store names it), the person (login) and their device, and the chain the turn's
    request came with (empty unless this node is itself a middle hop)."""

    task_id: str
    context_id: str
    owner: str
    person: str
    device: str
    chain: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Link:
    """A peer as a hand-off reaches it: its URL, its short name (for the person and the
    ledger) and its MagicDNS name (the hop's audience)."""

    url: str
    short: str
    audience: str


class Directory(Protocol):
    """The tailnet's tailagents this node may hand work to (directory.py)."""

    async def peers(self) -> list[Peer]: ...

    async def find(self, name: str) -> Peer: ...


class HopSigner:
    """This node's hop of a chain: its card key (read again only when `keys rotate`
    wrote a new one), its JWKS URL as its card names it, its MagicDNS name."""

    def __init__(self, state_dir: Any, jku: str, localapi: LocalAPI) -> None:
        self._state_dir = state_dir
        self._jku = jku
        self._localapi = localapi
        self._key: tuple[int, SigningKey] | None = None
        self._node = ""

    async def node(self) -> str:
        if not self._node:
            try:
                name = self_dns_name(await self._localapi.status())
            except LocalAPIUnavailable as exc:
                raise DelegationFailed(f"cannot name this node to the peer: {exc}") from None
            if not name:
                raise DelegationFailed("tailscaled does not name this node: is it logged in?")
            self._node = name.lower()
        return self._node

    def _signing_key(self) -> SigningKey:
        # cryptography loads with the first hand-off, not with the server (test_at_rest).
        from tailagent.card.keys import KeyStore

        version = key_version(self._state_dir)
        if self._key is None or self._key[0] != version:
            self._key = (version, KeyStore(self._state_dir).current())
        return self._key[1]

    async def chain(self, turn: TurnIdentity, audience: str, person: str, device: str) -> list[str]:
        """The turn's chain with this node's hop to `audience`, acting as `person`."""
        node = await self.node()
        return extend(
            turn.chain, self._signing_key(), self._jku, person=person, device=device,
            node=node, audience=audience, task_id=turn.task_id, context_id=turn.context_id,
        )  # fmt: skip


class DelegatorFactory:
    """One per server: what every turn's Delegator shares (the way to peers, the
    signer, the link table, the ledger)."""

    def __init__(
        self,
        settings: Settings,
        directory: Directory,
        links: DelegationLinks,
        usage: Usage,
        localapi: LocalAPI,
        proxy: str | None = None,
    ) -> None:
        """`proxy`: how this node reaches the tailnet when not `delegation.proxy` (an
        embedded node's own proxy)."""
        self.settings = settings
        self.directory = directory
        self.links = links
        self.usage = usage
        self.signer = HopSigner(settings.state_dir, settings.advertised_url + JWKS_PATH, localapi)
        self.proxy = settings.delegation.proxy or proxy or None
        self.peers = PeerClients(self.proxy)
        # The request handler's way to take back a question a peer closed: set once the
        # server has made it (the handler is made after the turns it serves).
        self.withdraw: Withdraw | None = None

    def for_turn(self, turn: TurnIdentity, ask: Asker, notify: Notify) -> Delegator:
        return Delegator(self, turn, ask, notify)


class PeerClients:
    """How a hand-off reaches a peer, without paying again for what does not change
    between hand-offs: the TLS trust store (loading it is most of an httpx client's
    making, tens of ms) and the peer's card, kept as long as the directory keeps its
    listing and read again after a hand-off to it fails (the peer may have moved)."""

    def __init__(self, proxy: str | None) -> None:
        self._proxy = proxy
        self._tls: ssl.SSLContext | None = None
        self._cards: dict[str, tuple[float, AgentCard]] = {}

    def http(self) -> httpx.AsyncClient:
        """A client to the tailnet; the read has no bound, a peer's turn may be long."""
        if self._tls is None:
            self._tls = httpx.create_ssl_context()
        return httpx.AsyncClient(
            headers={"A2A-Version": "1.0"},
            timeout=httpx.Timeout(10.0, read=None),
            proxy=self._proxy,
            verify=self._tls,
        )

    async def client(self, http: httpx.AsyncClient, url: str) -> Client:
        """An A2A client of the peer at `url` on `http`."""
        kept = self._cards.get(url)
        if kept is None or time.monotonic() - kept[0] >= TTL:
            kept = (time.monotonic(), await A2ACardResolver(http, url).get_agent_card())
            self._cards[url] = kept
        return ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(kept[1])

    def forget(self, url: str) -> None:
        """The peer at `url` failed a hand-off: its card is read again next time."""
        self._cards.pop(url, None)


class Delegator:
    """Implements agents.events.TurnTools for one turn of one person."""

    def __init__(
        self, factory: DelegatorFactory, turn: TurnIdentity, ask: Asker, notify: Notify
    ) -> None:
        self._factory = factory
        self._turn = turn
        self._ask = ask
        self._notify = notify
        self._running: set[PeerTask] = set()
        self._leave = False

    async def list_peers(self) -> list[JSONDict]:
        peers = await self._factory.directory.peers()
        return [
            {"name": p.peer.split(".")[0], "url": p.url, "agent": p.name, "skills": p.skills}
            for p in peers
        ]

    async def delegate(
        self,
        peer: str,
        message: str,
        conversation: str | None = None,
        progress: Progress | None = None,
    ) -> str:
        found = await self._factory.directory.find(peer)
        short = found.peer.split(".")[0] or peer
        peer_context = conversation or await self._factory.links.peer_context(
            self._turn.context_id, found.url
        )
        await self._consent(found, short, message, peer_context)
        link = Link(found.url, short, audience(found))
        subject = _first_line(message)
        return await self._follow(
            link, progress, lambda task: task.run(message, peer_context), subject
        )

    async def resume(self, answer: Answer) -> tuple[str, str]:
        """The peer's name and its answer, for a hand-off a previous run of this box left
        waiting on the person: `answer`, given since, goes to the peer's task this turn's
        task last handed work to (the store keeps the link), signed as who gave it, and
        the task is followed to its end as a new one is. DelegationFailed (its reason) when
        there is none or the peer's task fails."""
        kept = await self._factory.links.of_task(self._turn.task_id)
        if not kept:
            raise DelegationFailed("this task handed no work to a peer that is kept")
        last = kept[-1]
        host = (urlsplit(last.peer_url).hostname or last.peer_url).lower()
        link = Link(last.peer_url, host.split(".")[0], host)
        answerer = answer.answerer or self._turn.person

        def follow(task: PeerTask) -> Awaitable[Outcome]:
            return task.resume(last.peer_task_id, last.peer_context_id, answer, answerer)

        return link.short, await self._follow(link, None, follow)

    async def _follow(
        self,
        link: Link,
        progress: Progress | None,
        step: Callable[[PeerTask], Awaitable[Outcome]],
        subject: str = "",
    ) -> str:
        """Runs `step` on a PeerTask of the peer at `link`; its answer, its cost recorded
        as the person's delegated cost (the peer task's whole cost, replacing any figure
        kept for it before). `subject`: what the link to the peer's task records of the
        work handed (its first line), for a later hand-off into that conversation to name."""
        turn, links = self._turn, self._factory.links

        async def report(line: str) -> None:
            if progress is not None:
                await progress(line)
            else:
                await self._notify(Notice(line))

        async def sign(person: str) -> list[str]:
            device = turn.device if person == turn.person else ""
            return await self._factory.signer.chain(turn, link.audience, person, device)

        async def linked(peer_task_id: str, peer_context_id: str) -> None:
            await links.add(
                turn.task_id, link.url, peer_task_id, peer_context_id,
                context_id=turn.context_id, subject=subject,
            )  # fmt: skip

        peers = self._factory.peers
        async with peers.http() as http:
            try:
                client = await peers.client(http, link.url)
            except Exception as exc:
                raise DelegationFailed(f"cannot reach {link.short} at {link.url}: {exc}") from None
            task = PeerTask(client, link.short, sign, self._ask, report, linked, turn.person)
            self._running.add(task)
            try:
                outcome = await step(task)
            except BaseException as exc:
                # A hand-off that ends without the peer's answer (refused, failed, the
                # turn over) leaves nothing waiting there for good: its task is cancelled,
                # unless this server stops and leaves it for the next start (`leave`).
                if not self._leave:
                    await _cancel_quietly(task)
                if isinstance(exc, DelegationFailed):
                    peers.forget(link.url)
                raise
            finally:
                self._running.discard(task)
                await client.close()
        if outcome.cost_usd:
            await self._factory.usage.record_delegated(
                turn.owner, turn.context_id, turn.task_id, link.short, outcome.cost_usd,
                peer_task_id=task.task_id,
            )  # fmt: skip
        return outcome.text

    async def _consent(
        self, found: Peer, short: str, message: str, peer_context: str | None
    ) -> None:
        """Asks the person unless a rule lets this peer have work without asking (named
        by its short name or its MagicDNS name). Work that goes into an existing
        conversation on the peer (one the agent named, or the one this conversation
        handed work to before) says which, so the person sees where it goes."""
        allowed = {name.lower() for name in self._factory.settings.delegation.allow_peers}
        if allowed & {short.lower(), audience(found)}:
            return
        where = await self._where(found, short, peer_context) if peer_context else ""
        tool_input: JSONDict = {"peer": short, "message": message}
        if peer_context:
            tool_input["conversation"] = peer_context
        asked = PermissionAsked(
            request_id="",
            tool="delegate",
            input=tool_input,
            title=f"Hand to {short}{where}: {_first_line(message)}",
            options=HAND_OPTIONS,
        )
        answer = await self._ask(asked, None)
        if not (isinstance(answer, PermissionDecision) and answer.allow):
            raise DelegationFailed("the person declined")

    def leave_peers(self) -> None:
        """The server stops: the peer tasks the turn waits on are left for the next
        start to follow (session.py's `leave_peers`), not cancelled as the turn ends."""
        self._leave = True

    async def _where(self, found: Peer, short: str, peer_context: str) -> str:
        """The peer conversation a hand-off continues, as the consent names it: its short
        id and the title of the last work this conversation handed there, when it did."""
        ident = peer_context[:SHORT_ID]
        last = await self._factory.links.subject(self._turn.context_id, found.url, peer_context)
        if last:
            return f", in its conversation {ident} (last: {last!r})"
        return f", continuing an existing conversation on {short} ({ident})"

    async def cancel(self) -> None:
        """Cancels the peer tasks this turn started that still run."""
        running = list(self._running)
        await asyncio.gather(*(task.cancel() for task in running), return_exceptions=True)


def _first_line(message: str) -> str:
    """A hand-off's title: the first line of the work handed, as the peer titles it."""
    lines = message.strip().splitlines()
    return lines[0][:TITLE_LIMIT] if lines else ""


async def _cancel_quietly(task: PeerTask) -> None:
    """Cancels the peer's task, bounded: an unreachable peer does not hold the turn's end
    (its task then ends by its own timeouts, as any left by a dead caller does)."""
    try:
        async with asyncio.timeout(CANCEL_TIMEOUT):
            await task.cancel()
    except Exception as exc:
        log.warning("cancelling the peer's task %s: %s", task.task_id, exc)


def audience(peer: Peer) -> str:
    """The node a hop calls: the MagicDNS name in the peer's URL."""
    return (urlsplit(peer.url).hostname or peer.peer).lower()
