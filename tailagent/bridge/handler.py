"""a2a-sdk's request handler, with the rules tailagent adds before a turn starts.

These checks run before the SDK opens the task's event stream: a refusal here
touches nothing but the request that was refused.

Where this differs from the SDK 1.3.0 by hand (the spec or DESIGN.md asks for it):
- a message that names only `taskId` inherits the task's `contextId` (the SDK
  would mint a fresh one);
- a messageId the task already holds is renamed, so the SDK's de-duplication
  does not drop a second turn's words from the history;
- a streamed follow-up starts with the stored task, so a client can tell a resume
  from a new task;
- a refused push URL is refused with the reason (the SDK's hook says only "invalid");
- in a store several servers share, a task another server runs is cancelled through
  that server and a push config added for it reaches that server (bridge/remote.py);
  a follow-up to it is refused with its URL;
- a prompt is answered once: a second answer is refused saying who answered first,
  also when two arrive together (the first claims the prompt as it is admitted);
- a conversation is its owner's (bridge/owners.py): a message, diff, merge or
  discard naming another person's context is "not found", as another's task is;
- a person who spent their day's budget (bridge/usage.py) is refused a new task,
  and the refusal is audited.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from a2a.helpers import new_task_from_user_message
from a2a.server.agent_execution import SimpleRequestContextBuilder
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import PushNotificationConfigStore
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    Message,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.proto_utils import validate_proto_required_fields
from a2a.utils.task import apply_history_length, validate_history_length
from google.protobuf.json_format import MessageToDict

from tailagent.access.identity import OwnerUser, caller_of
from tailagent.agents.events import PermissionAsked
from tailagent.agents.modes import mode_refusal
from tailagent.bridge import attachments
from tailagent.bridge.answers import AlreadyAnswered, first_answer_text, reply_request_id
from tailagent.bridge.audit import AuditEntry, AuditLog
from tailagent.bridge.conversations import (
    Isolated,
    Refused,
    Shared,
    listing,
    operate,
    requested_operation,
)
from tailagent.bridge.executor import BridgeExecutor, reply_of
from tailagent.bridge.owners import ConversationOwners
from tailagent.bridge.parked import waiting_of
from tailagent.bridge.publish import data_part, text_part
from tailagent.bridge.quick import QuickTurns
from tailagent.bridge.remote import CANCEL, CONFIRM_TIMEOUT, POLL_INTERVAL, PUSH, TaskSignals
from tailagent.bridge.sessions import ContextBusy, SessionPool
from tailagent.bridge.state import UNSEEN_UNTIL_SETTLED
from tailagent.bridge.store import CoalescingTaskStore
from tailagent.bridge.turns import TurnGate
from tailagent.bridge.usage import Spending
from tailagent.card.builder import for_caller
from tailagent.config import AgentSettings, AttachmentSettings, WorkspaceSettings
from tailagent.push.targets import PushRefused, PushTargets
from tailagent.task_states import ENDED_STATES
from tailagent.tool_rules import Rule

BUSY_STATES = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)


def runs_elsewhere(task_id: str, url: str, advice: str) -> UnsupportedOperationError:
    """The refusal of a request only the server that runs the task can serve."""
    return UnsupportedOperationError(
        message=(
            f"Task {task_id} runs on another tailagent server that shares this store "
            f"({url}); {advice}"
        )
    )


# What a message naming a conversation that is not the caller's may do instead.
START_ANOTHER = "; to start a conversation, leave contextId out or name another"


def not_found(context_id: str, hint: str = "") -> TaskNotFoundError:
    """The refusal of a conversation that is not the caller's: the words an unknown one
    gets, so whether it exists does not leak."""
    return TaskNotFoundError(message=f"Conversation {context_id} not found{hint}")


def _is_admin(context: ServerCallContext) -> bool:
    caller = caller_of(context)
    return caller is not None and caller.may("admin")


def _refuse_unless_own(
    owner: str | None, context_id: str, context: ServerCallContext, hint: str = ""
) -> None:
    """Refuses a conversation that is not the caller's: an admin may use anyone's, but
    nobody one that nobody has started."""
    if owner is None or (owner != resolve_user_scope(context) and not _is_admin(context)):
        raise not_found(context_id, hint)


def ended(task: Task) -> str:
    """How a task ended, as people say it: `completed`, `been canceled`."""
    word = TaskState.Name(task.status.state).removeprefix("TASK_STATE_").lower()
    return "been " + word if word in ("canceled", "rejected") else word


class GuardedRequestHandler(DefaultRequestHandler):
    def __init__(
        self,
        executor: BridgeExecutor,
        store: CoalescingTaskStore,
        card: AgentCard,
        extended_card: AgentCard,
        *,
        pool: SessionPool,
        push_configs: PushNotificationConfigStore,
        push_targets: PushTargets,
        signals: TaskSignals,
        rules: tuple[Rule, ...] = (),
        attachment_limits: AttachmentSettings | None = None,
        max_concurrent_turns: int = AgentSettings().max_concurrent_turns,
        conversations: Isolated | Shared | None = None,
        owners: ConversationOwners,
        max_worktrees_per_caller: int = WorkspaceSettings().max_worktrees_per_caller,
        spending: Spending | None = None,
        audit: AuditLog | None = None,
    ) -> None:
        self._spending = spending
        self._audit = audit
        self._conversations = conversations or Shared("not configured")
        self._owners = owners
        self._max_worktrees = max_worktrees_per_caller
        self._gate = TurnGate(max_concurrent_turns)
        self._attachment_limits = attachment_limits or AttachmentSettings()
        self._push_targets = push_targets
        self._signals = signals
        super().__init__(
            executor,
            store,
            card,
            push_config_store=push_configs,
            extended_agent_card=extended_card,
            extended_card_modifier=self._for_caller,
            request_context_builder=SimpleRequestContextBuilder(
                should_populate_referred_tasks=False,
                task_store=None,
                task_id_generator=store.minted,
                context_id_generator=pool.minted_contexts,
            ),
        )
        self._store = store
        self._pool = pool
        self._executor = executor
        self._quick = QuickTurns(executor, store)
        self._rules = rules

    async def _admit(self, params: SendMessageRequest, context: ServerCallContext) -> Task | None:
        """Applies the pre-turn rules; returns the stored task a follow-up names."""
        message = params.message
        limits = self._attachment_limits
        try:
            attachments.check(message, limits.max_part_bytes, limits.max_message_bytes,
                              limits.url_hosts)  # fmt: skip
        except attachments.AttachmentRefused as exc:
            raise InvalidParamsError(message=str(exc)) from None
        mode = MessageToDict(message.metadata).get("mode") if message.HasField("metadata") else None
        caller = caller_of(context)
        if isinstance(mode, str) and mode and not (caller and caller.may("admin")):
            refusal = mode_refusal(mode, self._pool.caller_modes)
            if refusal is not None:
                raise InvalidParamsError(message=refusal)
        stored: Task | None = None
        if message.task_id:
            stored = await self._store.get(message.task_id, context)
            if stored is None:
                return None  # the SDK answers TaskNotFound in its own words
            elsewhere = self._store.runs_elsewhere(stored)
            if elsewhere is not None:
                raise runs_elsewhere(
                    message.task_id,
                    elsewhere,
                    "send follow-ups for it there. Any of the servers can read or cancel it.",
                )
            if message.context_id and message.context_id != stored.context_id:
                raise InvalidParamsError(
                    message=(
                        f"Task {message.task_id} is in conversation {stored.context_id}, not "
                        f"{message.context_id}: leave contextId out of a follow-up"
                    )
                )
            message.context_id = stored.context_id
            self._bind_answer(message, stored)
            self._refuse_second_answer(message)  # before "still working": it says more
            if stored.status.state in ENDED_STATES:
                raise UnsupportedOperationError(
                    message=(
                        f"Task {message.task_id} has already {ended(stored)}: send a new "
                        "message without taskId (with its contextId to go on in the same "
                        "conversation)."
                    )
                )
            if stored.status.state in BUSY_STATES:
                raise UnsupportedOperationError(
                    message=(
                        f"Task {message.task_id} is still working; wait for input-required "
                        "or send a new message without taskId."
                    )
                )
            self._check_approver(message.task_id, context)
            if any(m.message_id == message.message_id for m in stored.history):
                message.metadata.update({"originalMessageId": message.message_id})
                message.message_id = f"{message.message_id}~{uuid.uuid4().hex[:8]}"
        if not message.task_id:  # before a new conversation is named for it
            await self._check_budget(message, context)
        await self._enter_conversation(message, context)
        holder = self._pool.holder(message.context_id)
        if holder is not None and holder != message.task_id:
            raise UnsupportedOperationError(
                message=str(await self._busy(message.context_id, holder, context))
            )
        if holder is None and not message.task_id:
            running = await self._store.context_busy_elsewhere(message.context_id)
            if running is not None:
                busy = await self._busy(message.context_id, running[0], context)
                raise UnsupportedOperationError(
                    message=f"{busy} (It runs on another tailagent server: {running[1]}.)"
                )
        if message.task_id:
            # Last, and with no await since the task was read: the check and the
            # claim are one step on the event loop.
            try:
                self._executor.claim(message.task_id, context)
            except AlreadyAnswered as exc:
                raise InvalidRequestError(message=str(exc)) from None
        return stored

    async def _enter_conversation(self, message: Message, context: ServerCallContext) -> None:
        """Makes sure the message's conversation is its sender's: a new message starts
        one of the sender's (a `contextId` nobody has yet becomes theirs); another
        person's is refused as not found, but to an admin."""
        me = resolve_user_scope(context)
        owner = await self._owners.owner(message.context_id) if message.context_id else None
        if owner is None:
            if not _is_admin(context):
                await self._check_room(me)
            if not message.context_id:
                message.context_id = self._pool.minted_contexts.generate()
                await self._owners.start(message.context_id, me)
                return
            owner = await self._owners.claim(message.context_id, me)
        _refuse_unless_own(owner, message.context_id, context, START_ANOTHER)

    async def _check_room(self, me: str) -> None:
        """Refuses a new conversation to a person whose conversations hold as many
        worktrees as they may (each costs a checkout, kept until merged or discarded).
        Admins, whose box it is, are not counted."""
        if not isinstance(self._conversations, Isolated):
            return
        held = 0
        for context_id in self._conversations.worktrees.conversations():
            held += await self._owners.owner(context_id) == me
        if held >= self._max_worktrees:
            raise UnsupportedOperationError(
                message=(
                    f"{me} has {held} conversations with a worktree, as many as one person "
                    f"may (workspace.max_worktrees_per_caller = {self._max_worktrees}): "
                    "merge or discard one (tailagent merge|discard CONTEXT), or go on in "
                    "one of them with its contextId"
                )
            )

    async def _check_budget(self, message: Message, context: ServerCallContext) -> None:
        """Refuses a new task to a person who spent their day's budget, saying which
        budget, what was spent and when it resets; the refusal goes to the audit log.
        Admins, whose box it is, are not held to one."""
        caller = caller_of(context)
        if self._spending is None or caller is None or caller.may("admin"):
            return
        refusal = await self._spending.refusal(caller.owner)
        if refusal is None:
            return
        if self._audit is not None:
            entry = AuditEntry(
                task_id="", context_id=message.context_id, tool="budget",
                input=f"a new task for {caller.describe()}", decision="deny", reason=refusal,
                answered_by="tailagent (budget)",
            )  # fmt: skip
            await self._audit.record(entry)
        raise UnsupportedOperationError(message=refusal)

    async def _busy(self, context_id: str, task_id: str, context: ServerCallContext) -> ContextBusy:
        """The refusal of a busy conversation, naming its task only to a caller who may
        read that task (an admin's turn in someone's conversation stays the admin's)."""
        readable = await self._store.get(task_id, context) is not None
        return ContextBusy(context_id, task_id if readable else None)

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        stored = await self._store.get(params.id, context)
        if stored is not None and stored.status.state in ENDED_STATES:
            raise TaskNotCancelableError(
                message=f"Task {params.id} has already {ended(stored)}: nothing to cancel."
            )
        if stored is not None and (quick := await self._quick.cancel(params.id, context)):
            return quick
        elsewhere = self._store.runs_elsewhere(stored) if stored is not None else None
        if elsewhere is None:
            if stored is not None and self._executor.holds(params.id):
                # A turn the SDK has no ActiveTask for (a quick send now waiting, a task
                # taken back after a restart) would only be marked CANCELED, its agent
                # process held for good: given one, the SDK runs the executor's cancel.
                # Only for a task the caller may read (`stored`): another's id must not
                # get an ActiveTask made for it before the SDK says it is not found.
                await self._active_task_registry.get_or_create(params.id, context)
            return await super().on_cancel_task(params, context)
        await self._signals.send(params.id, CANCEL)
        for _ in range(int(CONFIRM_TIMEOUT / POLL_INTERVAL)):
            await asyncio.sleep(POLL_INTERVAL)
            task = await self._store.get(params.id, context)
            if task is None or self._store.runs_elsewhere(task) is None:
                break
        else:
            await self._signals.withdraw(params.id, CANCEL)
            raise InternalError(
                message=(
                    f"The server that runs task {params.id} ({elsewhere}) did not confirm the "
                    f"cancel within {CONFIRM_TIMEOUT:.0f} s; it may be down. Its unfinished "
                    "tasks are closed when it starts again."
                )
            )
        if task is None or task.status.state != TaskState.TASK_STATE_CANCELED:
            state = TaskState.Name(task.status.state) if task else "gone"
            raise TaskNotCancelableError(message=f"Task {params.id} ended first: {state}")
        return task

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        made = await super().on_create_task_push_notification_config(params, context)
        stored = await self._store.get(params.task_id, context)
        if stored is not None and self._store.runs_elsewhere(stored) is not None:
            await self._signals.send(params.task_id, PUSH)  # that server delivers
        return made

    async def cancel_for_peer(self, task_id: str, owner: str) -> None:
        """Cancels a task this server runs, as another server sharing the store asked."""
        await self.on_cancel_task(
            CancelTaskRequest(id=task_id), ServerCallContext(user=OwnerUser(owner))
        )

    async def _reject_unsafe_push_url(self, url: str) -> None:
        try:
            await self._push_targets.resolve(url)
        except PushRefused as exc:
            raise InvalidParamsError(message=str(exc)) from None

    async def _for_caller(self, card: AgentCard, context: ServerCallContext) -> AgentCard:
        caller = caller_of(context)
        if caller is None:
            return card
        roles = sorted(caller.roles)
        applying = [r.describe() for r in self._rules if not r.roles or set(r.roles) & caller.roles]
        return for_caller(card, caller.owner, roles, applying)

    @staticmethod
    def _bind_answer(message: Message, stored: Task) -> None:
        """An answer that names no prompt is for the one its sender could see: the one
        the task shows. Named in the message, it is refused once another answer took
        that prompt (the stored task may still show it a moment after the turn moved
        on), rather than applied to what came next or taken for a new prompt."""
        waiting = waiting_of(stored)
        if waiting is not None and not reply_request_id(reply_of(message)):
            message.metadata.update({"requestId": waiting.prompt.request_id})

    def _refuse_second_answer(self, message: Message) -> None:
        """An answer naming a prompt this server saw answered is refused, naming who
        answered first, rather than restated as stale or refused as "still working"."""
        request_id = reply_request_id(reply_of(message))
        first = self._executor.answered(message.task_id, request_id) if request_id else None
        if first is not None:
            raise InvalidRequestError(
                message=first_answer_text(message.task_id, first.request_id, first)
            )

    def _check_approver(self, task_id: str, context: ServerCallContext) -> None:
        """An answer to a permission prompt needs the approver role. Refused here,
        the prompt stays pending, untouched, for a caller who has it."""
        caller = caller_of(context)
        if isinstance(self._executor.pending(task_id), PermissionAsked) and not (
            caller and caller.may("approver")
        ):
            who = caller.owner if caller else "this caller"
            raise InvalidRequestError(
                message=(
                    f"{who} may not answer permission prompts (it lacks the approver role); "
                    f"task {task_id} stays waiting for a caller who has it."
                )
            )

    async def _operate(
        self, operation: dict[str, Any], params: SendMessageRequest, context: ServerCallContext
    ) -> Message:
        """A merge, discard or diff of a conversation: the caller's own (or any, for an
        admin), never while a turn runs in it; merge and discard need the approver role.
        Or the list of the caller's conversations."""
        kind = operation["kind"]
        if kind == "conversations":
            return await self._conversation_list(context)
        if not params.message.context_id:
            raise InvalidParamsError(message=f"a {kind} names its conversation: set contextId")
        context_id = await self._named(params.message.context_id, context)
        _refuse_unless_own(await self._owners.owner(context_id), context_id, context)
        caller = caller_of(context)
        who = caller.owner if caller else "this caller"
        if kind != "diff" and not (caller and caller.may("approver")):
            raise InvalidRequestError(
                message=f"{who} may not {kind} conversations (it lacks the approver role)"
            )
        holder = self._pool.holder(context_id)
        if holder is not None and kind != "diff":
            busy = await self._busy(context_id, holder, context)
            raise UnsupportedOperationError(message=f"{busy.running}: let it finish, or "
                                            f"cancel it, before a {kind}")  # fmt: skip
        try:
            text, data = await operate(self._conversations, context_id, operation)
        except Refused as exc:
            raise UnsupportedOperationError(message=str(exc)) from None
        reply = Message(
            message_id=uuid.uuid4().hex,
            role=Role.ROLE_AGENT,
            context_id=context_id,
            parts=[text_part(text), data_part(data)],
        )
        reply.metadata.update({"kind": kind})
        return reply

    async def _mine(self, context_ids: list[str], context: ServerCallContext) -> list[str]:
        """Those of `context_ids` that the caller started (an admin's too: only theirs)."""
        me = resolve_user_scope(context)
        return [c for c in context_ids if await self._owners.owner(c) == me]

    async def _named(self, name: str, context: ServerCallContext) -> str:
        """The conversation a diff, merge or discard names: its id, or a unique prefix of
        the id of one of the caller's own (the short id its branch `tailagent/<short id>`
        shows). Another person's conversations are not candidates: they are not found."""
        if not isinstance(self._conversations, Isolated) or await self._owners.owner(name):
            return name
        found = await self._mine(self._conversations.worktrees.named(name), context)
        if len(found) > 1:
            raise InvalidParamsError(
                message=f"{name} is the start of {len(found)} of your conversations "
                f"({', '.join(found[:5])}{', …' if len(found) > 5 else ''}): give more of its id"
            )
        return found[0] if found else name

    async def _conversation_list(self, context: ServerCallContext) -> Message:
        """The caller's conversations with a worktree (or a merge) here: `tailagent
        conversations`."""
        known = self._conversations.worktrees.known() if isinstance(
            self._conversations, Isolated) else {}  # fmt: skip
        mine = await self._mine(list(known), context)
        holders = {}
        for context_id in mine:
            if (task_id := self._pool.holder(context_id)) is not None:
                # Named to a caller who may read it (an admin's turn stays the admin's).
                readable = await self._store.get(task_id, context) is not None
                holders[context_id] = task_id if readable else ""
        try:
            text, data = await listing(self._conversations, mine, holders)
        except Refused as exc:
            raise UnsupportedOperationError(message=str(exc)) from None
        reply = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_AGENT,
                        parts=[text_part(text), data_part(data)])  # fmt: skip
        reply.metadata.update({"kind": "conversations"})
        return reply

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Message | Task:
        operation = requested_operation(params.message)
        if operation is not None:
            return await self._operate(operation, params, context)
        await self._admit(params, context)
        config = params.configuration
        unseen = not (
            self._store.shared
            or config.return_immediately
            or config.HasField("task_push_notification_config")
        )
        if unseen:
            context.state[UNSEEN_UNTIL_SETTLED] = True
        try:
            if unseen and not params.message.task_id and self._executor.turns_into_task(params):
                return await self._quick_send(params, context)
            async with self._gate.turn():
                return await super().on_message_send(params, context)
        except BaseException:
            self._executor.release(context)  # an answer that did not apply frees its prompt
            raise

    async def _quick_send(self, params: SendMessageRequest, context: ServerCallContext) -> Task:
        """A new task nobody sees before it ends or waits, run by bridge/quick.py after
        the checks the SDK's path makes."""
        validate_proto_required_fields(params)
        validate_history_length(params.configuration)
        request = await self._request_context_builder.build(
            params=params,
            task_id=None,
            context_id=params.message.context_id or None,
            task=None,
            context=context,
        )
        async with self._gate.turn():
            task = await self._quick.send(request, context)
        return apply_history_length(task, params.configuration)

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        stored = await self._store.get(params.id, context)
        elsewhere = self._store.runs_elsewhere(stored) if stored is not None else None
        if elsewhere is not None:  # its events flow on that server only
            raise runs_elsewhere(
                params.id, elsewhere, "subscribe there, or read it here with GetTask."
            )
        async for event in super().on_subscribe_to_task(params, context):
            yield event

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        operation = requested_operation(params.message)
        if operation is not None:
            yield await self._operate(operation, params, context)
            return
        stored = await self._admit(params, context)
        # A waiting task whose caller leaves still runs, as any task does; a stop leaves
        # it submitted, and the next start closes it as any unfinished task.
        waiting: Task | None = None
        try:
            if stored is None and not params.message.task_id and self._gate.full():
                waiting = stored = await self._submit(params.message, context)
            if stored is not None:
                yield stored
            async with self._gate.turn():
                if waiting is not None:
                    now = await self._store.get(waiting.id, context)
                    if now is not None and now.status.state in ENDED_STATES:
                        yield now  # canceled while it waited
                        return
                async for event in super().on_message_send_stream(params, context):
                    yield event
        except BaseException:
            self._executor.release(context)  # an answer that did not apply frees its prompt
            raise

    async def _submit(self, message: Message, context: ServerCallContext) -> Task:
        """The task of a stream that must wait for its place, made and stored now so
        the caller sees it at once, submitted, instead of nothing until a place frees.
        The message then names it, and the SDK takes it up as it would a follow-up
        (the message is in its history already, so the SDK does not add it again)."""
        task = new_task_from_user_message(message)
        task.id = self._store.minted.generate()
        task.context_id = message.context_id or self._pool.minted_contexts.generate()
        message.task_id, message.context_id = task.id, task.context_id
        await self._store.save(task, context)
        return task
