"""The a2a-sdk AgentExecutor: runs agent turns for A2A tasks.

A turn that asks the caller something publishes input-required and returns from
`execute()`, while the agent itself stays parked inside its turn. The caller's
follow-up message calls `execute()` again; the pending prompt lives here, in a
registry keyed by task id, not inside one `execute()` call.

A prompt is answered once. The handler admits an answer by claiming the pending
prompt (`claim`); until that answer is applied or given back, any other answer
to the task is refused naming who came first, and once applied, the record of
who decided what (`answered`) refuses late answers that name the prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import Message, SendMessageRequest, Task, TaskState
from google.protobuf.json_format import MessageToDict

from tailagent.access.identity import caller_of
from tailagent.agents.events import (
    AgentBackend,
    AgentEvent,
    AgentSession,
    AgentStartError,
    Notice,
    PermissionAsked,
    PermissionDecision,
    PromptData,
    Prompting,
    PromptPart,
    PromptText,
    QuestionAsked,
    TurnDone,
    TurnFailed,
    TurnOptions,
    UsageUpdated,
)
from tailagent.bridge import attachments, tck
from tailagent.bridge.answers import (
    DEFAULT_VIA,
    Answerer,
    AnswerError,
    AnswerRecord,
    Reply,
    decision_text,
    deny_message,
    parse_answer,
    record_of,
)
from tailagent.bridge.audit import AuditEntry, AuditLog, summarize
from tailagent.bridge.claims import Claims, claim_of
from tailagent.bridge.conversations import (
    Conversations,
    Shared,
    TurnRecord,
    signature,
    subject_of,
)
from tailagent.bridge.parked import Waiting, resume_text, waiting_of
from tailagent.bridge.publish import Publisher, open_task, text_part
from tailagent.bridge.rules import first_match
from tailagent.bridge.sessions import PoolFull, SessionPool
from tailagent.bridge.usage import Cost, Spending
from tailagent.config import AttachmentSettings
from tailagent.costs import dollars
from tailagent.metrics import DECISIONS, PROMPTS, TURN_SECONDS
from tailagent.tool_rules import Rule
from tailagent.workspace.git import GitError

log = logging.getLogger(__name__)

DRAIN_TIMEOUT = 10.0
# The stop reason of a turn its agent ended at its budget (the Claude Agent SDK's
# `max_budget_usd`), and of one tailagent ended as it crossed a budget.
BUDGET_STOP = "max_budget_usd"
# Agent sessions whose last running cost is remembered (a forgotten one's next turn
# counts its whole running total).
MAX_SESSION_COSTS = 10_000
# The call-context state key naming the channel a request came through ("web" from
# the web page); absent means A2A.
VIA_KEY = "via"


@dataclass
class TaskRuntime:
    """What one task keeps while its turn is alive on this server."""

    task_id: str
    context_id: str
    session: AgentSession
    events: AsyncIterator[AgentEvent]
    publisher: Publisher
    pending: Prompting | None = None
    denied: set[str] = field(default_factory=set)
    denials: int = 0
    cancelled: bool = False
    # Set when the server stops: the turn's stream then ends with this failure.
    stop_reason: str | None = None
    pump: asyncio.Task[None] | None = None  # while a request streams the turn
    started: float = field(default_factory=time.monotonic)
    roles: frozenset[str] = frozenset()  # of the caller whose task this is, for rules
    turn: TurnRecord | None = None  # what the turn's commit will say (worktree isolation)
    directory: Path | None = None  # the conversation's worktree; None: the workspace
    # Taken back after a restart: the agent's reloaded session gets the answer as a
    # prompt (`parked.resume_text`), not as the reply to a request it no longer has.
    restored: bool = False
    owner: str = "unknown"  # whose work it is: the person its cost is counted to
    cost: Cost = field(default_factory=Cost)  # the task's turns so far
    # The agent session's running cost (ACP `usage_update`) when this turn started, and
    # now: the turn's share is the difference.
    session_cost_before: float | None = None
    session_cost: float | None = None

    def session_grew(self) -> float | None:
        """What the session's running cost grew by in this turn; None when the agent
        reported none. A smaller total than before: the agent counts from zero again."""
        if self.session_cost is None:
            return None
        before = self.session_cost_before or 0.0
        return self.session_cost - before if self.session_cost >= before else self.session_cost


def turn_cost(event: TurnDone, runtime: TaskRuntime) -> Cost:
    """What a turn cost: the agent's own figure, else what the session's running cost
    grew by during the turn; its tokens from the turn's usage."""
    usd = event.cost if event.cost is not None else runtime.session_grew()
    usage = event.usage
    return Cost(usd or 0.0, _tokens(usage, "input"), _tokens(usage, "output"))


def _tokens(usage: dict[str, Any], kind: str) -> int:
    """Tokens of one kind in an agent's usage figures (camelCase or snake_case; cached
    input counts as input)."""
    names: tuple[str, ...] = (f"{kind}Tokens", f"{kind}_tokens")
    if kind == "input":
        names += ("cacheReadInputTokens", "cache_read_input_tokens",
                  "cacheCreationInputTokens", "cache_creation_input_tokens")  # fmt: skip
    return sum(int(v) for n in names if isinstance(v := usage.get(n), int | float))


async def _no_events() -> AsyncIterator[AgentEvent]:
    """A restored turn's events until its answer starts the reloaded session's prompt."""
    return
    yield


def via_of(context: ServerCallContext | None) -> str:
    via = context.state.get(VIA_KEY) if context is not None else None
    return via if isinstance(via, str) and via else DEFAULT_VIA


def answerer_of(context: ServerCallContext | None) -> Answerer:
    """Who a request answers as. A device is its short MagicDNS name, as people call it."""
    caller = caller_of(context)
    if caller is None:
        return Answerer("unknown", via=via_of(context))
    return Answerer(caller.who, caller.node.split(".")[0], via_of(context))


def audit_name(context: ServerCallContext | None) -> str:
    """The audit log's `answered_by`: how the caller was established, then the device
    and the channel (`user:a@b (whois …) on laptop via web`)."""
    caller = caller_of(context)
    if caller is None:
        return "unknown"
    answerer = answerer_of(context)
    device = f" on {answerer.node}" if answerer.node else ""
    channel = f" via {answerer.via}" if answerer.via != DEFAULT_VIA else ""
    return caller.describe() + device + channel


async def prompt_parts(
    message: Message, inbox: Path, settings: AttachmentSettings
) -> list[PromptPart]:
    """The message as the agent gets it; attachments become files (fetched if need be)."""
    parts: list[PromptPart] = []
    for index, part in enumerate(message.parts, 1):
        name = attachments.safe_name(part.filename, index)
        if part.HasField("text"):
            parts.append(PromptText(part.text))
        elif part.HasField("data"):
            parts.append(PromptData(MessageToDict(part.data)))
        elif part.HasField("raw"):
            parts.append(attachments.file_part(name, part.media_type, part.raw, inbox))
        elif part.HasField("url"):
            data = await attachments.fetch(part.url, name, settings.max_part_bytes)
            parts.append(attachments.file_part(name, part.media_type, data, inbox))
    return parts


def turn_options(message: Message) -> TurnOptions:
    """The mode and model a caller asked for in message metadata (checked by the handler)."""
    meta = MessageToDict(message.metadata) if message.HasField("metadata") else {}
    mode, model = meta.get("mode"), meta.get("model")
    return TurnOptions(
        mode=mode if isinstance(mode, str) and mode else None,
        model=model if isinstance(model, str) and model else None,
    )


def reply_of(message: Message) -> Reply:
    texts = [p.text for p in message.parts if p.HasField("text")]
    data = tuple(
        item
        for p in message.parts
        if p.HasField("data")
        for item in [MessageToDict(p.data)]
        if isinstance(item, dict)
    )
    meta = MessageToDict(message.metadata) if message.HasField("metadata") else {}
    request_id = meta.get("requestId")
    return Reply(" ".join(texts), data, request_id if isinstance(request_id, str) else None)


def request_key(event: PermissionAsked) -> str:
    return event.tool + " " + json.dumps(event.input, sort_keys=True, ensure_ascii=False)


class BridgeExecutor(AgentExecutor):
    def __init__(
        self,
        backend: AgentBackend,
        pool: SessionPool,
        audit: AuditLog,
        *,
        max_permission_denials: int = 3,
        rules: tuple[Rule, ...] = (),
        workspace: Path | None = None,
        attachment_settings: AttachmentSettings | None = None,
        conversations: Conversations | None = None,
        spending: Spending | None = None,
    ) -> None:
        self._spending = spending
        # Each agent session's last running cost (ACP `usage_update`), by session id.
        self._session_costs: dict[str, float] = {}
        self._conversations: Conversations = conversations or Shared("not configured")
        self._rules = rules
        self._workspace = workspace or Path.cwd()
        self._attachments = attachment_settings or AttachmentSettings()
        self._backend = backend
        self._pool = pool
        self._audit = audit
        self._max_denials = max_permission_denials
        self._runtimes: dict[str, TaskRuntime] = {}
        self._claims = Claims()
        # Tasks a previous run left waiting for an answer, taken back at start.
        self._waiting: dict[str, Waiting] = {}

    def restore(self, tasks: list[Task]) -> None:
        """Takes back the tasks a previous run left waiting for an answer (`parked`)."""
        for task in tasks:
            waiting = waiting_of(task)
            if waiting is not None:
                self._waiting[task.id] = waiting

    def pending(self, task_id: str) -> Prompting | None:
        """The prompt a task is parked on, if any."""
        runtime = self._runtimes.get(task_id)
        if runtime is not None:
            return runtime.pending
        waiting = self._waiting.get(task_id)
        return waiting.prompt if waiting is not None else None

    def answered(self, task_id: str, request_id: str) -> AnswerRecord | None:
        """Who answered this prompt on this server, what, when and through which channel."""
        return self._claims.answered(task_id, request_id)

    def claim(self, task_id: str, context: ServerCallContext) -> None:
        """Holds the task's pending prompt for the answer this request carries.

        Synchronous, and called last in the handler's admission: nothing runs between
        the check and the hold, so of two answers sent at once exactly one gets it.
        Raises AlreadyAnswered while another answer holds the prompt, and after one was
        applied while the task is not parked again (the stored task may still read
        input-required then; letting this answer on would fail the task).
        """
        if task_id not in self._runtimes and task_id not in self._waiting:
            return
        prompt = self.pending(task_id)
        request_id = prompt.request_id if prompt is not None else None
        self._claims.take(task_id, request_id, answerer_of(context), context)

    def release(self, context: ServerCallContext) -> None:
        """Gives back the prompt this request claimed, if its answer was not applied
        (the request failed first): the prompt is answerable again."""
        self._claims.give_back(context)

    async def _record(
        self,
        task: TaskRuntime | Waiting,
        asked: PermissionAsked,
        allow: bool,
        reason: str,
        by: str,
        label: str,
    ) -> None:
        """Writes the audit row; `label` is the metrics' name for the decider (one per
        caller, never per device or channel)."""
        DECISIONS.labels("allow" if allow else "deny", label).inc()
        entry = AuditEntry(
            task_id=task.task_id,
            context_id=task.context_id,
            tool=asked.tool,
            input=summarize(asked.input),
            decision="allow" if allow else "deny",
            reason=reason,
            answered_by=by,
        )
        try:
            await self._audit.record(entry)
        except Exception:
            log.exception("writing the audit log")

    def turns_into_task(self, params: SendMessageRequest) -> bool:
        """Whether a new message becomes a task of this executor's (every message but
        the echo agent's TCK scenarios, which answer as the TCK asks)."""
        return self._backend.name != "echo" or tck.scenario_of(params.message) is None

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None and context.task_id and context.context_id
        task_id, context_id = context.task_id, context.context_id
        first_turn = context.current_task is None
        scenario = tck.scenario_of(message) if self._backend.name == "echo" else None
        if scenario is not None and task_id not in self._runtimes:
            await tck.run(scenario, message, task_id, context_id, first_turn, event_queue)
            return
        if first_turn:
            await open_task(message, task_id, context_id, event_queue)
        updater = TaskUpdater(event_queue, task_id, context_id)
        runtime = self._runtimes.get(task_id)
        claim = claim_of(context.call_context)
        if claim is not None and not self._claims.holds(claim):
            # Given back (its request failed before this ran) or its turn ended: the
            # prompt is gone or another answer's by now, so this one applies nowhere.
            return
        if runtime is None and task_id in self._waiting:
            runtime = await self._take_back(self._waiting.pop(task_id), context, updater)
            if runtime is None:
                return
        if runtime is not None and runtime.pending is not None:
            if not await self._apply_answer(runtime, message, updater, context.call_context):
                return
        elif runtime is None:
            runtime = await self._start_turn(context, message, updater)
            if runtime is None:
                return
        else:
            # The guard refuses messages for a working task before they get here.
            await Publisher(task_id, context_id).fail(updater, "Task is already running.")
            return
        await self._pump(runtime, updater)

    async def _start_turn(
        self, context: RequestContext, message: Message, updater: TaskUpdater
    ) -> TaskRuntime | None:
        task_id, context_id = context.task_id or "", context.context_id or ""
        publisher = Publisher(task_id, context_id)
        try:
            directory = await self._conversations.directory(context_id)
        except GitError as exc:
            await publisher.fail(updater, f"The conversation's worktree is not usable: {exc}")
            return None
        owner = caller_of(context.call_context)
        admin = owner is not None and owner.may("admin")
        options = turn_options(message)
        try:
            # An admin's turns (the box is theirs) are not counted against a share.
            session, resumed = await self._pool.acquire(
                context_id, task_id, directory, mode=options.mode, any_mode=admin,
                caller=None if admin or owner is None else owner.owner,
            )  # fmt: skip
        except (AgentStartError, PoolFull) as exc:  # expected (a login, all busy): one line
            log.warning("the agent could not start for context %s: %s", context_id, exc)
            await publisher.fail(updater, f"The agent could not start: {exc}")
            return None
        except Exception as exc:
            log.exception("opening an agent session for context %s", context_id)
            await publisher.fail(updater, f"The agent could not start: {exc}")
            return None
        try:
            box = attachments.inbox(directory or self._workspace, task_id)
            parts = await prompt_parts(message, box, self._attachments)
        except (attachments.AttachmentRefused, httpx.HTTPError, OSError) as exc:
            await self._pool.release(context_id, task_id)
            await publisher.fail(updater, f"An attachment could not be taken: {exc}")
            return None
        runtime = TaskRuntime(
            task_id,
            context_id,
            session,
            session.prompt(parts, options),
            publisher,
            roles=owner.roles if owner else frozenset(),
            directory=directory,
            owner=owner.owner if owner else "unknown",
        )
        runtime.session_cost_before = self._session_costs.get(session.session_id)
        self._runtimes[task_id] = runtime
        # Who asked, kept in the task's metadata for every view of it (the desk's list).
        asker = answerer_of(context.call_context)
        runtime.turn = TurnRecord(
            task_id, context_id, subject_of(message), signature(asker.by, asker.node)
        )
        requested = {"requestedBy": {"who": asker.by, "device": asker.node}}
        await publisher.status(updater, TaskState.TASK_STATE_WORKING, "started", metadata=requested)
        if resumed:
            # An ACP session says how it was taken up (session/resume or session/load).
            how = getattr(session, "reattached_with", None)
            said = f" (with {how})" if how else ""
            await publisher.publish(
                updater, Notice(f"Resumed the agent session of this context{said}.")
            )
        return runtime

    async def _take_back(
        self, waiting: Waiting, context: RequestContext, updater: TaskUpdater
    ) -> TaskRuntime | None:
        """The runtime of a task a previous run left waiting, with the agent's session
        reloaded to take the answer; None (the task failed, saying why) when it cannot be."""
        task_id, context_id = waiting.task_id, waiting.context_id
        publisher = Publisher(task_id, context_id, continuing=waiting.artifacts)
        why = ""
        try:
            directory = await self._conversations.directory(context_id)
            session, resumed = await self._pool.acquire(context_id, task_id, directory)
        except (GitError, AgentStartError) as exc:
            why = str(exc)
        except Exception as exc:
            log.exception("reloading the agent session of context %s", context_id)
            why = str(exc)
        else:
            if not resumed:
                await self._pool.release(context_id, task_id)
                why = f"{self._backend.name} cannot load its earlier session"
        if why:
            self._claims.drop(task_id)
            await publisher.fail(
                updater,
                "The server restarted while this task waited for an answer, and the agent's "
                f"session could not be reloaded to take it ({why}). Send the request again "
                "as a new task.",
                "server_restarted",
            )
            return None
        caller = caller_of(context.call_context)
        runtime = TaskRuntime(
            task_id,
            context_id,
            session,
            _no_events(),
            publisher,
            pending=waiting.prompt,
            roles=caller.roles if caller else frozenset(),
            turn=TurnRecord(task_id, context_id, waiting.subject, waiting.requested_by),
            directory=directory,
            restored=True,
            owner=caller.owner if caller else "unknown",
        )
        self._runtimes[task_id] = runtime
        await publisher.publish(
            updater,
            Notice(
                "The server restarted while this task waited; the agent's session was "
                "reloaded to take the answer."
            ),
        )
        return runtime

    async def _apply_answer(
        self,
        runtime: TaskRuntime,
        message: Message,
        updater: TaskUpdater,
        call: ServerCallContext,
    ) -> bool:
        """Applies an answer and publishes who decided what; False when the turn
        does not go on (the question restated, or loop protection ended it)."""
        pending = runtime.pending
        assert pending is not None
        claim = claim_of(call)
        try:
            parsed = parse_answer(reply_of(message), pending)
        except AnswerError as exc:
            self.release(call)  # the prompt is still pending: answerable again
            await runtime.publisher.ask(updater, pending, note=str(exc))
            return False
        record = record_of(pending, parsed, claim.answerer if claim else answerer_of(call))
        self._claims.settle(runtime.task_id, claim, record)
        runtime.pending = None
        await runtime.publisher.status(
            updater,
            TaskState.TASK_STATE_WORKING,
            "resumed",
            [text_part(decision_text(record))],
            record.metadata(),
        )
        if isinstance(pending, PermissionAsked) and not parsed.denied and runtime.turn:
            who = record.answerer
            via = f" via {who.via}" if who.via != DEFAULT_VIA else ""
            runtime.turn.approvals.append(f"{signature(who.by, who.node)}{via}: {pending.tool}")
        if isinstance(pending, PermissionAsked):
            caller = caller_of(call)
            label = caller.owner if caller else "unknown"
            allow = not parsed.denied
            await self._record(runtime, pending, allow, parsed.reason, audit_name(call), label)
        if isinstance(pending, PermissionAsked) and parsed.denied:
            runtime.denied.add(request_key(pending))
            runtime.denials += 1
            if runtime.denials >= self._max_denials:
                reason = (
                    f"Stopped: {runtime.denials} permission denials in this task "
                    f"(limit {self._max_denials})."
                )
                await self._interrupt(runtime, pending, parsed.reason, reason, updater)
                return False
        if runtime.restored:
            runtime.restored = False
            text = resume_text(pending, parsed, record)
            runtime.events = runtime.session.prompt([PromptText(text)], TurnOptions())
            return True
        await runtime.session.answer(pending.request_id, parsed.answer)
        return True

    async def _interrupt(
        self,
        runtime: TaskRuntime,
        pending: PermissionAsked,
        reason: str,
        why: str,
        updater: TaskUpdater,
    ) -> None:
        """Denies with interrupt, lets the agent wind down unheard, then fails once, saying why."""
        option = next((o.id for o in pending.options if not o.allows), None)
        decision = PermissionDecision(
            False, option, deny_message(reason), interrupt=True, reason=reason
        )
        with contextlib.suppress(Exception):
            await runtime.session.answer(pending.request_id, decision)
        try:
            async with asyncio.timeout(DRAIN_TIMEOUT):
                async for event in runtime.events:
                    if isinstance(event, PermissionAsked | QuestionAsked):
                        await runtime.session.answer(event.request_id, decision)
        except (TimeoutError, Exception):
            log.warning("task %s: agent did not stop after an interrupt", runtime.task_id)
            with contextlib.suppress(Exception):
                await runtime.session.cancel()
        await self._end(runtime)
        await runtime.publisher.fail(updater, why, kind="loop_protection")

    async def _pump(self, runtime: TaskRuntime, updater: TaskUpdater) -> None:
        runtime.pump = asyncio.current_task()
        try:
            await self._pump_events(runtime, updater)
        except Exception:
            # A turn broken by a fault of ours would hold its agent process for good:
            # the process goes (mid-turn, it cannot serve another), the task fails.
            await self._pool.discard(runtime.context_id)
            await self._end(runtime)
            raise
        finally:
            runtime.pump = None

    async def _pump_events(self, runtime: TaskRuntime, updater: TaskUpdater) -> None:
        publisher = runtime.publisher
        while True:
            try:
                event = await anext(runtime.events)
            except StopAsyncIteration:
                event = TurnFailed("The agent ended its turn without a result.")
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("task %s: agent turn failed", runtime.task_id)
                await self._pool.discard(runtime.context_id)
                event = TurnFailed(f"The agent failed: {exc}")
            if runtime.cancelled:
                if runtime.stop_reason is not None:
                    # The caller's open stream gets the end, not a cut connection.
                    await publisher.fail(updater, runtime.stop_reason, "server_stopped")
                return
            if isinstance(event, PermissionAsked):
                if request_key(event) in runtime.denied:
                    why = (
                        "Stopped: the agent requested the same denied permission again "
                        f"({event.tool})."
                    )
                    by = "tailagent (loop protection)"
                    await self._record(runtime, event, False, why, by, "tailagent")
                    await self._interrupt(runtime, event, "already denied", why, updater)
                    return
                if await self._apply_rule(runtime, event, updater):
                    continue
                await self._park(runtime, event, updater)
                return
            if isinstance(event, QuestionAsked):
                await self._park(runtime, event, updater)
                return
            if isinstance(event, TurnDone):
                await self._end(runtime)
                outcome: dict[str, Any] = {"agentSessionId": runtime.session.session_id}
                outcome.update(await self._count(runtime, turn_cost(event, runtime)))
                if (worktree := await self._turn_ended(runtime)) is not None:
                    outcome["worktree"] = worktree
                if event.stop_reason == BUDGET_STOP:
                    why = self._agent_budget_text(runtime)
                    await self._fail_at_budget(runtime, why, outcome, updater)
                    return
                await publisher.finish(updater, event, outcome)
                return
            if isinstance(event, TurnFailed):
                await self._end(runtime)
                if runtime.session_cost is not None:  # what it cost before failing
                    await self._count(runtime, turn_cost(TurnDone(), runtime))
                await self._turn_ended(runtime)  # what it changed before failing is kept
                await publisher.fail(updater, event.message)
                return
            if isinstance(event, UsageUpdated):
                # No stream shows usage yet; publishing it would fail the turn.
                if event.cost_usd is not None and (stop := await self._crossed(runtime, event)):
                    await self._stop_at_budget(runtime, stop, updater)
                    return
                continue
            await publisher.publish(updater, event)

    async def _count(self, runtime: TaskRuntime, cost: Cost) -> dict[str, Any]:
        """Keeps a turn's cost with its person and task; the task's and its
        conversation's costs, for the task's metadata."""
        runtime.cost = runtime.cost + cost
        if runtime.session_cost is not None:
            self._session_costs[runtime.session.session_id] = runtime.session_cost
            if len(self._session_costs) > MAX_SESSION_COSTS:  # the oldest sessions go
                for stale in list(self._session_costs)[: MAX_SESSION_COSTS // 2]:
                    del self._session_costs[stale]
        if self._spending is None:
            return {"cost": runtime.cost.as_json()}
        try:
            total = await self._spending.record(runtime.owner, runtime.context_id, cost)
        except Exception:
            log.exception("task %s: keeping the turn's cost", runtime.task_id)
            return {"cost": runtime.cost.as_json()}
        return {"cost": runtime.cost.as_json(), "conversationCost": total.as_json()}

    async def _crossed(self, runtime: TaskRuntime, event: UsageUpdated) -> str | None:
        """Why the turn stops now that its session's running cost is `event.cost_usd`
        (a budget it crossed); None while it is within them."""
        assert event.cost_usd is not None
        if runtime.session_cost_before is None and runtime.session_cost is None:
            runtime.session_cost_before = self._session_costs.get(runtime.session.session_id)
        runtime.session_cost = event.cost_usd
        if self._spending is None:
            return None
        grew = runtime.session_grew() or 0.0
        task_limit = self._spending.budgets.per_task_usd
        if task_limit is not None and runtime.cost.usd + grew >= task_limit:
            return self._budget_stop_text(runtime.cost.usd + grew)
        budget = await self._spending.daily_budget(runtime.owner)
        if budget is None:
            return None
        spent = await self._spending.usage.spent(runtime.owner) + grew
        if spent < budget[0]:
            return None
        which = "their own daily budget" if budget[1] else "budgets.per_caller_daily_usd"
        return (
            f"Stopped: {dollars(spent)} spent today reached the daily budget of "
            f"{dollars(budget[0])} ({which})."
        )

    def _budget_stop_text(self, spent: float) -> str:
        """Why tailagent ended a turn whose task crossed `budgets.per_task_usd`."""
        limit = self._spending.budgets.per_task_usd if self._spending else None
        return (
            f"Stopped: this task reached its budget of {dollars(limit or 0)} "
            f"(budgets.per_task_usd); it cost {dollars(spent)}."
        )

    def _agent_budget_text(self, runtime: TaskRuntime) -> str:
        """Why the agent ended a turn at its own budget (Claude Code's `max_budget_usd`,
        which it counts over its whole session, not one task)."""
        limit = self._spending.budgets.per_task_usd if self._spending else None
        given = f" of {dollars(limit)} (budgets.per_task_usd)" if limit is not None else ""
        return (
            f"Stopped: the agent reached its budget{given}, which it counts over its whole "
            f"session; this task cost {dollars(runtime.cost.usd)}."
        )

    async def _stop_at_budget(self, runtime: TaskRuntime, why: str, updater: TaskUpdater) -> None:
        """Ends a turn that crossed a budget as its agent's own budget stop ends one: the
        agent is told to stop, what the turn cost is kept, the task fails saying why."""
        with contextlib.suppress(Exception):
            await runtime.session.cancel()
        done: TurnDone | None = None
        try:
            async with asyncio.timeout(DRAIN_TIMEOUT):
                async for event in runtime.events:
                    if isinstance(event, UsageUpdated) and event.cost_usd is not None:
                        runtime.session_cost = event.cost_usd
                    elif isinstance(event, PermissionAsked | QuestionAsked):
                        await runtime.session.answer(event.request_id, PermissionDecision(False))
                    elif isinstance(event, TurnDone):
                        done = event
        except (TimeoutError, Exception):
            log.warning("task %s: agent did not stop at its budget", runtime.task_id)
        await self._end(runtime)
        outcome = await self._count(runtime, turn_cost(done or TurnDone(), runtime))
        await self._turn_ended(runtime)
        await self._fail_at_budget(runtime, why, outcome, updater)

    @staticmethod
    async def _fail_at_budget(
        runtime: TaskRuntime, why: str, outcome: dict[str, Any], updater: TaskUpdater
    ) -> None:
        """The task fails saying which budget stopped it, its cost kept with it."""
        await runtime.publisher.status(
            updater, TaskState.TASK_STATE_FAILED, "budget", [text_part(why)], outcome
        )

    async def _park(
        self, runtime: TaskRuntime, event: PermissionAsked | QuestionAsked, updater: TaskUpdater
    ) -> None:
        """The turn waits for the caller's answer, however long (across a restart too)."""
        runtime.pending = event
        PROMPTS.labels("permission" if isinstance(event, PermissionAsked) else "question").inc()
        await self._pool.persist()
        await runtime.publisher.ask(updater, event)

    async def _turn_ended(self, runtime: TaskRuntime) -> dict[str, Any] | None:
        return None if runtime.turn is None else await self._conversations.turn_ended(runtime.turn)

    async def _apply_rule(
        self, runtime: TaskRuntime, event: PermissionAsked, updater: TaskUpdater
    ) -> bool:
        """Decides by the first matching rule; False when the caller must be asked."""
        root = runtime.directory or self._workspace  # where the agent's relative paths start
        # Off the loop: it resolves paths on disk, and a long command takes a while to read.
        rules, roles = self._rules, runtime.roles
        rule = await asyncio.to_thread(first_match, rules, event, roles, root) if rules else None
        if rule is None or rule.decision == "ask":
            return False
        allow = rule.decision == "allow"
        by = f"tailagent ({rule.describe()})"
        if allow and runtime.turn is not None:
            runtime.turn.approvals.append(f"{by}: {event.tool}")
        await self._record(runtime, event, allow, rule.describe(), by, "tailagent")
        wanted = "allow" if allow else "reject"
        option = next((o.id for o in event.options if o.kind.startswith(wanted)), None)
        if allow:
            decision = PermissionDecision(True, option)
        else:
            runtime.denied.add(request_key(event))  # asked again, loop protection ends it
            why = f"denied by {rule.describe()}"
            decision = PermissionDecision(False, option, deny_message(why), reason=why)
        verdict = "Allowed" if allow else "Denied"
        await runtime.publisher.publish(
            updater, Notice(f"{verdict} by {rule.describe()}: {event.title}")
        )
        await runtime.session.answer(event.request_id, decision)
        return True

    async def _end(self, runtime: TaskRuntime) -> None:
        self._claims.drop(runtime.task_id)
        if self._runtimes.pop(runtime.task_id, None) is not None:
            TURN_SECONDS.observe(time.monotonic() - runtime.started)
        await self._pool.release(runtime.context_id, runtime.task_id)

    @property
    def running(self) -> int:
        return len(self._runtimes)

    @property
    def waiting(self) -> int:
        """Tasks waiting for an answer: they outlast a stop (see `parked`)."""
        parked = sum(1 for r in self._runtimes.values() if r.pending and r.pump is None)
        return parked + len(self._waiting)

    async def stop_all(self, reason: str, grace: float = 5.0) -> list[str]:
        """At server stop: every turn is told to stop. A turn a request is streaming
        ends its stream with `reason` (their ids are returned); the store records why
        the others (waiting for an answer) ended (`CoalescingTaskStore.close_held`)."""
        runtimes = list(self._runtimes.values())
        pumps = {r.task_id: r.pump for r in runtimes if r.pump is not None}
        for runtime in runtimes:
            runtime.cancelled = True
            runtime.stop_reason = reason
        await asyncio.gather(
            *(runtime.session.cancel() for runtime in runtimes), return_exceptions=True
        )
        if pumps:
            await asyncio.wait(pumps.values(), timeout=grace)
        for runtime in runtimes:
            await self._end(runtime)
        return list(pumps)

    def holds(self, task_id: str) -> bool:
        """Whether a turn of this task is alive here (running, or waiting for an answer,
        also one taken back after a restart): its cancel must reach `cancel`, which
        alone gives its agent session back and records the refused prompt."""
        return task_id in self._runtimes or task_id in self._waiting

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id = context.task_id or ""
        context_id = context.context_id or ""
        runtime = self._runtimes.get(task_id)
        waiting = self._waiting.pop(task_id, None)
        held: TaskRuntime | Waiting | None = runtime or waiting
        pending = runtime.pending if runtime is not None else waiting.prompt if waiting else None
        if held is not None and isinstance(pending, PermissionAsked):
            # A prompt nobody will answer now: the audit says who refused it by cancelling.
            call = context.call_context
            canceller = caller_of(call)
            label = canceller.owner if canceller else "unknown"
            await self._record(held, pending, False, "task canceled", audit_name(call), label)
        if runtime is not None:
            runtime.cancelled = True
            await runtime.session.cancel()
            if pending is not None:
                # Nobody is iterating a parked turn: close it here, or it leaks.
                with contextlib.suppress(Exception):
                    await runtime.events.aclose()  # type: ignore[attr-defined]
            await self._end(runtime)
        self._claims.drop(task_id)
        updater = TaskUpdater(event_queue, task_id, context_id)
        await Publisher(task_id, context_id).status(
            updater,
            TaskState.TASK_STATE_CANCELED,
            "canceled",
            [text_part("The task was canceled by the caller.")],
        )
