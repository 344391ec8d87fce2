"""Which saves of a task are worth a person's phone, and what the phone shows.

The task store reports every save (live.py's `Desk` hears the same calls); this looks
at two moments only: a task starting to wait for an answer (once per prompt), and a
task failing. Everything else returns after a dictionary lookup, so a turn of
thousands of chunks costs nothing here.

Who is told is who may answer: the task's owner and the admins, and for a permission
prompt only those of them with the approver role, as the access policy says at the
moment of sending (standing.py: asked for each device, off the save's path; a person
it no longer lets in loses their subscriptions). A failure is told to the person who
started the task. A person with a phone and a laptop is told on both; each message is
sealed for its own browser.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from a2a.types.a2a_pb2 import Task, TaskState
from google.protobuf.json_format import MessageToDict

from tailagent.webpush.actions import ActionTokens, Bound
from tailagent.webpush.standing import Judge, Standing, nobody_yet
from tailagent.webpush.subscriptions import Subscription, Subscriptions

log = logging.getLogger("tailagent.webpush")

WAITING = TaskState.TASK_STATE_INPUT_REQUIRED
FAILED = TaskState.TASK_STATE_FAILED
# Sends one message to one browser, in the background (sender.PushSender.send).
Send = Callable[[Subscription, dict[str, Any], str], None]
FAILURES_KEPT = 1024  # failed tasks already told (a final state may be saved again)
TITLE_CHARS = 120
TEXT_CHARS = 300


@dataclass(frozen=True, slots=True)
class Prompt:
    """What a waiting task asks, in the shape a notification needs."""

    kind: str  # "permission", "question", "input"
    key: str  # the request id, or the status message's id: told once per key
    request_id: str
    said: str  # "wants to run `rm -rf build`", "asks: Which colour?"
    by: str = ""  # whose agent asks, for a prompt relayed from a peer ("devbox-2's agent")


def _clip(text: str, chars: int) -> str:
    line = " ".join(text.split())
    return line if len(line) <= chars else line[: chars - 1] + "…"


def _data_of(task: Task) -> dict[str, Any]:
    for part in task.status.message.parts:
        if part.HasField("data"):
            value = MessageToDict(part.data)
            if isinstance(value, dict) and value.get("kind"):
                return value
    return {}


def prompt_of(task: Task) -> Prompt:
    data = _data_of(task)
    text = "".join(p.text for p in task.status.message.parts if p.HasField("text"))
    request_id = str(data.get("requestId", ""))
    key = request_id or task.status.message.message_id
    if data.get("kind") == "permission_request":
        tool_input = data.get("input")
        command = tool_input.get("command") if isinstance(tool_input, dict) else None
        if isinstance(command, str) and command.strip():
            said = f"wants to run `{_clip(command, TEXT_CHARS)}`"
        else:
            said = (
                f"asks to use {_clip(str(data.get('title') or data.get('toolName')), TEXT_CHARS)}"
            )
        peer = str(data.get("relayedFrom") or "")
        return Prompt("permission", key, request_id, said, f"{peer}'s agent" if peer else "")
    if data.get("kind") == "ask_user_question":
        questions = data.get("questions") or [{}]
        first = str(questions[0].get("question", "")) if isinstance(questions[0], dict) else ""
        return Prompt("question", key, request_id, f"asks: {_clip(first or text, TEXT_CHARS)}")
    return Prompt("input", key, request_id, f"waits for you: {_clip(text, TEXT_CHARS)}")


def first_prompt(task: Task) -> str:
    for message in task.history:
        text = "".join(p.text for p in message.parts if p.HasField("text")).strip()
        if text:
            return _clip(text.splitlines()[0], TITLE_CHARS)
    return "(a task)"


class Alerts:
    def __init__(
        self,
        subscriptions: Subscriptions,
        send: Send,
        tokens: ActionTokens,
        *,
        box: str,
        agent: str,
    ) -> None:
        self._subscriptions = subscriptions
        self._send = send
        self._tokens = tokens
        self._box = box
        self._agent = agent
        self._told: dict[str, str] = {}  # waiting task -> the prompt it was told for
        self._failures: OrderedDict[str, None] = OrderedDict()
        self._judge: Judge = nobody_yet
        self._telling: set[asyncio.Task[None]] = set()

    def follow(self, judge: Judge) -> None:
        """Whom a message reaches follows `judge`, the access policy asked at each
        sending; the app hands it over once it has built the policy."""
        self._judge = judge

    def remember(self, task: Task) -> None:
        """A task that already waited before a restart: its people were told then."""
        if task.status.state == WAITING:
            self._told[task.id] = prompt_of(task).key

    def saved(self, task: Task, owner: str) -> None:
        """The store saved a task (the hot path: returns at once unless it is news)."""
        state = task.status.state
        if state != WAITING:
            self._told.pop(task.id, None)
            if state == FAILED and task.id not in self._failures:
                self._failures[task.id] = None
                if len(self._failures) > FAILURES_KEPT:
                    self._failures.popitem(last=False)
                self._failed(task, owner)
            return
        if not task.status.message.parts:
            # The answer's own save: the SDK moves the prompt into the history while the
            # task is still marked waiting, until the turn takes the answer. No new prompt.
            return
        prompt = prompt_of(task)
        if self._told.get(task.id) == prompt.key:
            return
        self._told[task.id] = prompt.key
        self._waiting(task, owner, prompt)

    def _waiting(self, task: Task, owner: str, prompt: Prompt) -> None:
        role = "approver" if prompt.kind == "permission" else "caller"
        said: dict[str, Any] = {
            "title": f"{self._box}: {prompt.by or self._agent} {prompt.said}",
            "body": first_prompt(task),
            "url": f"/desk/tasks/{task.id}#ask",
            "tag": task.id,
            "kind": prompt.kind,
        }

        async def tell() -> None:
            for subscription, now in await self._judged(self._subscriptions.all()):
                if (subscription.owner != owner and not now.may("admin")) or not now.may(role):
                    continue
                message = dict(said)
                if prompt.kind == "permission" and prompt.request_id:
                    bound = Bound(subscription.owner, task.id, prompt.request_id)
                    message["token"] = self._tokens.issue(bound)
                self._send(subscription, message, _topic(task.id))

        self._start(tell())

    def _start(self, telling: Coroutine[Any, Any, None]) -> None:
        """Tells in the background: the policy is asked (a whois per device) off the
        save's path, which must not wait."""
        started = asyncio.create_task(telling)
        self._telling.add(started)
        started.add_done_callback(self._telling.discard)

    async def _judged(self, candidates: list[Subscription]) -> list[tuple[Subscription, Standing]]:
        """Each candidate with what the policy says of its person now; those it no
        longer lets in are dropped, and a judge that failed tells nobody."""
        asking = (self._judge(subscription) for subscription in candidates)
        answers = await asyncio.gather(*asking, return_exceptions=True)
        kept: list[tuple[Subscription, Standing]] = []
        for subscription, now in zip(candidates, answers, strict=True):
            if isinstance(now, BaseException):
                log.warning("push to %s's %s not sent: the access policy could not be asked "
                            "(%s)", subscription.owner, subscription.device, now)  # fmt: skip
            elif not now.let_in:
                log.info("push subscription of %s on %s dropped: %s",
                         subscription.owner, subscription.device, now.why)  # fmt: skip
                await self._subscriptions.gone(subscription.id)
            else:
                kept.append((subscription, now))
        return kept

    async def aclose(self) -> None:
        """Stops what is still being told (a stop does not wait on tailscaled)."""
        for telling in list(self._telling):
            telling.cancel()
        await asyncio.gather(*list(self._telling), return_exceptions=True)

    def _failed(self, task: Task, owner: str) -> None:
        reason = "".join(p.text for p in task.status.message.parts if p.HasField("text"))
        said = f"{first_prompt(task)} — {reason}" if reason else first_prompt(task)
        message = {
            "title": f"{self._box}: your task failed",
            "body": _clip(said, TEXT_CHARS),
            "url": f"/desk/tasks/{task.id}",
            "tag": task.id,
            "kind": "failed",
        }

        async def tell() -> None:
            for subscription, now in await self._judged(self._subscriptions.of(owner)):
                if now.may("caller"):
                    self._send(subscription, message, _topic(task.id))

        self._start(tell())


def _topic(task_id: str) -> str:
    """RFC 8030's Topic (32 base64url characters at most): a newer message for the
    same task replaces one the push service still holds for an offline phone."""
    return hashlib.sha256(task_id.encode()).hexdigest()[:32]
