"""One sub-task on a peer, followed from the first message to its end.

The peer's stream is read as it comes (progress lines, the answer's chunks). A stream
closes when the peer's task waits: the prompt is put to the person here and the answer
sent back as a follow-up to the same peer task, and streaming goes on. A stream that
breaks (the peer restarted, the tailnet dropped) is not the end of the task: the peer
is polled with GetTask until it answers again, for up to RECONNECT_LIMIT, and what it
says then decides (its task ended, waits, or still works: subscribed to again). An
answer that could not be delivered is sent again once the peer is back, without asking
the person twice. Every request carries a freshly signed chain (`sign`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial

import httpx
from a2a.client import Client, ClientCallContext
from a2a.client.errors import A2AClientError, A2AClientTimeoutError
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict

from tailagent.agents.events import (
    Answer,
    DelegationFailed,
    PermissionAsked,
    PermissionDecision,
    Prompting,
    PromptWithdrawn,
)
from tailagent.delegation.chain import CHAIN_HEADER, CHAIN_KEY
from tailagent.delegation.relay import NotAPrompt, prompt_of, reply_to

# How long a peer may stay unreachable before the hand-off is given up.
RECONNECT_LIMIT = 120.0
# While the person is asked a peer's question, how often the peer is read again to see
# whether it still asks: its own owner may answer it there, or its task end. A read is
# one signed GetTask (one nonce and one access line on the peer): every 2 s at first,
# when a person at either end is most likely acting, then less often, up to every 30 s
# for a question left waiting for hours.
STILL_ASKS_FIRST = 2.0
STILL_ASKS_LAST = 30.0
FIRST_BACKOFF = 0.25
MAX_BACKOFF = 5.0
RESPONSE_ARTIFACT = "response"
PROGRESS_KINDS = frozenset({"tool_use", "tool_result", "notice"})
_ENDED = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}

Sign = Callable[[str], Awaitable[list[str]]]  # acting person -> the chain to send
Ask = Callable[[Prompting, Awaitable[object] | None], Awaitable[Answer]]  # outbound.Asker
Report = Callable[[str], Awaitable[None]]
Linked = Callable[[str, str], Awaitable[None]]  # (peer task id, peer context id)


@dataclass(frozen=True, slots=True)
class Outcome:
    text: str
    cost_usd: float


class Unreachable(Exception):
    """The peer did not answer (a broken stream, a refused connection, a 5xx)."""


class PeerTask:
    def __init__(
        self,
        client: Client,
        peer: str,
        sign: Sign,
        ask: Ask,
        report: Report,
        linked: Linked,
        person: str,
    ) -> None:
        self._client = client
        self._peer = peer
        self._sign = sign
        self._ask = ask
        self._report = report
        self._linked = linked
        self._person = person
        self.task_id = ""
        self.context_id = ""
        self._status = TaskStatus()
        self._metadata: dict[str, object] = {}
        self._chunks: list[str] = []
        self._result: str | None = None
        # Answers given here, by the peer's request id: sent again, never asked again.
        self._answers: dict[str, tuple[Answer, str]] = {}
        # An answer given before this box restarted, for the prompt the peer waits on.
        self._given: tuple[Answer, str] | None = None
        # What each of the peer's turns said it cost (`costUsd`), for a peer that does not
        # say what its whole task cost.
        self._turn_costs: list[float] = []

    async def run(self, text: str, context_id: str | None) -> Outcome:
        first = Message(
            message_id=uuid.uuid4().hex, role=Role.ROLE_USER, context_id=context_id or ""
        )
        first.parts.append(Part(text=text))
        return await self._follow(partial(self._send, first, self._person))

    async def resume(self, task_id: str, context_id: str, answer: Answer, answerer: str) -> Outcome:
        """Follows a peer task a previous run of this box left waiting on the person: the
        answer they gave since goes to the prompt the peer waits on now (the one they
        were shown, kept by the peer across its own restarts too), then on to its end."""
        self.task_id, self.context_id = task_id, context_id
        self._given = (answer, answerer)
        return await self._follow(self._current)

    async def _follow(self, step: Callable[[], AsyncIterator[StreamResponse]]) -> Outcome:
        while True:
            try:
                async for event in step():
                    await self._take(event)
            except Unreachable as exc:
                if not self.task_id:
                    raise DelegationFailed(f"cannot reach {self._peer}: {exc}") from None
                await self._report(f"{self._peer} does not answer ({exc}); waiting for it")
                await self._task(await self._recover())
            state = self._status.state
            if state in _ENDED:
                return self._outcome()
            if state == TaskState.TASK_STATE_INPUT_REQUIRED:
                step = await self._reply()
            else:
                step = self._subscribe

    async def cancel(self) -> None:
        """Asks the peer to cancel its task (nothing when it has not named one yet)."""
        if self.task_id and self._status.state not in _ENDED:
            context = await self._context(self._person)
            await self._client.cancel_task(CancelTaskRequest(id=self.task_id), context=context)

    async def _context(self, person: str) -> ClientCallContext:
        chain = await self._sign(person)
        return ClientCallContext(service_parameters={CHAIN_HEADER: ",".join(chain)})

    async def _send(self, message: Message, person: str) -> AsyncIterator[StreamResponse]:
        chain = await self._sign(person)
        message.metadata.update({CHAIN_KEY: chain})
        context = ClientCallContext(service_parameters={CHAIN_HEADER: ",".join(chain)})
        stream = self._client.send_message(SendMessageRequest(message=message), context=context)
        async for event in _guarded(stream, self._peer):
            yield event

    async def _current(self) -> AsyncIterator[StreamResponse]:
        """The peer's task as it stands now (GetTask), as a stream of one."""
        context = await self._context(self._person)
        call = self._client.get_task(GetTaskRequest(id=self.task_id), context=context)
        yield StreamResponse(task=await _guarded_call(call, self._peer))

    async def _subscribe(self) -> AsyncIterator[StreamResponse]:
        context = await self._context(self._person)
        request = SubscribeToTaskRequest(id=self.task_id)
        async for event in _guarded(self._client.subscribe(request, context=context), self._peer):
            yield event

    async def _take(self, event: StreamResponse) -> None:
        if event.HasField("task"):
            await self._task(event.task)
        elif event.HasField("message"):
            self._result = _text(event.message)
            self._status = TaskStatus(state=TaskState.TASK_STATE_COMPLETED)
        elif event.HasField("status_update"):
            update = event.status_update
            await self._named(update.task_id, update.context_id)
            self._status = update.status
            self._metadata.update(MessageToDict(update.metadata))
            kind = MessageToDict(update.metadata).get("kind")
            line = _text(update.status.message)
            if kind == "result":
                self._result = line
                if usd := _usd(MessageToDict(update.metadata).get("costUsd")):
                    self._turn_costs.append(usd)
            elif kind in PROGRESS_KINDS and line:
                await self._report(f"{self._peer}: {line}")
        elif event.HasField("artifact_update"):
            update = event.artifact_update
            if update.artifact.artifact_id == RESPONSE_ARTIFACT:
                if not update.append:
                    self._chunks.clear()
                self._chunks.append(_text_parts(update.artifact.parts))

    async def _task(self, task: Task) -> None:
        await self._named(task.id, task.context_id)
        self._status = task.status
        self._metadata.update(MessageToDict(task.metadata))
        for artifact in task.artifacts:
            if artifact.artifact_id == RESPONSE_ARTIFACT:
                self._chunks = [_text_parts(artifact.parts)]

    async def _named(self, task_id: str, context_id: str) -> None:
        if not self.task_id and task_id:
            self.task_id, self.context_id = task_id, context_id
            await self._linked(task_id, context_id)

    async def _reply(self) -> Callable[[], AsyncIterator[StreamResponse]]:
        """The step that answers the peer's prompt (asked of the person here, or the
        answer already given when an earlier send of it did not arrive), or, when the
        prompt was answered or closed on the peer meanwhile, the step that reads its
        task as it is now: a question lives once, and an answer to a closed one is
        not sent."""
        try:
            pending = prompt_of(self._status.message, self._peer, self._person)
        except NotAPrompt as exc:
            raise DelegationFailed(str(exc)) from None
        given = self._answers.get(pending.request_id)
        if given is None and self._given is not None:
            given, self._given = self._given, None
            self._answers[pending.request_id] = given
        if given is None:
            try:
                answer = await self._ask(pending, self._until_closed(pending.request_id))
            except PromptWithdrawn:
                await self._report(
                    f"{self._peer}'s question was answered or closed on {self._peer}, "
                    f"so it is no longer asked here: {_title(pending)}"
                )
                return self._current
            given = (answer, answer.answerer or self._person)
            if given[1] != self._person:  # the answer judge refuses it first; fail closed
                raise DelegationFailed(
                    f"{given[1]} answered a question {self._peer} asks of {self._person}"
                )
            self._answers[pending.request_id] = given
            if not await self._still_asks(pending.request_id):
                # Closed there in the moment between the last read and the answer.
                await self._report(
                    f"{self._peer}'s question was already answered or closed on "
                    f"{self._peer}; {given[1]}'s answer was not sent: {_title(pending)}"
                )
                return self._current
        message = reply_to(
            pending, given[0], task_id=self.task_id, context_id=self.context_id, metadata={}
        )
        if isinstance(given[0], PermissionDecision) and isinstance(pending, PermissionAsked):
            verdict = "allowed" if given[0].allow else "denied"
            await self._report(f"{given[1]} {verdict}: {pending.title}")
        return partial(self._send, message, given[1])

    async def _until_closed(self, request_id: str) -> None:
        """Returns once the peer no longer asks `request_id` (read at growing intervals;
        a peer that does not answer is taken to still ask)."""
        every = STILL_ASKS_FIRST
        while True:
            await asyncio.sleep(every)
            if not await self._still_asks(request_id):
                return
            every = min(every * 1.25, STILL_ASKS_LAST)

    async def _still_asks(self, request_id: str) -> bool:
        """Whether the peer's task still waits on its prompt `request_id` (read again
        after the person took their time: the peer's owner may have answered there).
        A peer that does not answer now is taken to: the send is retried as any is."""
        context = await self._context(self._person)
        call = self._client.get_task(GetTaskRequest(id=self.task_id), context=context)
        try:
            now = await _guarded_call(call, self._peer)
        except Unreachable:
            return True
        if now.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
            return False
        try:
            return prompt_of(now.status.message, self._peer, self._person).request_id == (
                request_id
            )
        except NotAPrompt:
            return False

    async def _recover(self) -> Task:
        """The peer's task once the peer answers again; DelegationFailed past the limit."""
        deadline = time.monotonic() + RECONNECT_LIMIT
        delay = FIRST_BACKOFF
        while True:
            await asyncio.sleep(delay)
            try:
                context = await self._context(self._person)
                return await _guarded_call(
                    self._client.get_task(GetTaskRequest(id=self.task_id), context=context),
                    self._peer,
                )
            except Unreachable as exc:
                if time.monotonic() + delay > deadline:
                    raise DelegationFailed(
                        f"{self._peer} did not answer for {RECONNECT_LIMIT:.0f} s ({exc})"
                    ) from None
            delay = min(delay * 2, MAX_BACKOFF)

    def _outcome(self) -> Outcome:
        state = self._status.state
        if state != TaskState.TASK_STATE_COMPLETED:
            what = TaskState.Name(state).removeprefix("TASK_STATE_").lower()
            reason = _text(self._status.message) or "no reason given"
            raise DelegationFailed(f"{self._peer}'s task {what}: {reason}")
        text = self._result if self._result is not None else "".join(self._chunks)
        return Outcome(text, self._cost())

    def _cost(self) -> float:
        """The peer task's whole cost: what its metadata says the task cost (`cost.usd`, a
        tailagent peer's, which counts every turn, also an agent's that reports only
        its session's running total), else the sum of what its turns said."""
        task = self._metadata.get("cost")
        whole = _usd(task.get("usd")) if isinstance(task, dict) else None
        return whole if whole is not None else sum(self._turn_costs)


def _title(prompt: Prompting) -> str:
    """A relayed prompt as the person saw it."""
    if isinstance(prompt, PermissionAsked):
        return prompt.title
    return "; ".join(q.question for q in prompt.questions)


def _usd(value: object) -> float | None:
    """A figure the peer sent, when it is a number (the ledger judges the amount)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _text_parts(parts: object) -> str:
    return "".join(p.text for p in parts if p.HasField("text"))  # type: ignore[attr-defined]


def _text(message: Message) -> str:
    return _text_parts(message.parts).strip()


def _refusal(exc: BaseException, peer: str) -> Exception:
    """Unreachable for what a retry may mend; DelegationFailed, with the peer's words,
    for a refusal (4xx, an A2A error)."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, httpx.HTTPStatusError):
            status = cause.response.status_code
            if status >= 500:
                return Unreachable(f"HTTP {status}")
            try:
                body = cause.response.text.strip()[:300]
            except httpx.ResponseNotRead:
                body = ""
            return DelegationFailed(f"{peer} refused ({status}): {body or cause}")
        if isinstance(cause, httpx.TransportError | A2AClientTimeoutError):
            return Unreachable(str(cause) or type(cause).__name__)
        cause = cause.__cause__
    return DelegationFailed(f"{peer} refused: {exc}")


async def _guarded(
    stream: AsyncIterator[StreamResponse], peer: str
) -> AsyncIterator[StreamResponse]:
    try:
        async for event in stream:
            yield event
    except (A2AClientError, httpx.HTTPError) as exc:
        raise _refusal(exc, peer) from None
    except A2AError as exc:  # an error the peer answered with
        raise DelegationFailed(f"{peer} refused: {exc}") from None


async def _guarded_call(call: Awaitable[Task], peer: str) -> Task:
    try:
        return await call
    except (A2AClientError, httpx.HTTPError) as exc:
        raise _refusal(exc, peer) from None
    except A2AError as exc:
        raise DelegationFailed(f"{peer} refused: {exc}") from None
