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
  that server and a push config added for it reaches that server (store/signals.py);
  a follow-up to it is refused with its URL;
- a subscription that names the last event its client saw (`Last-Event-ID`) gets what
  it missed, then the live events, on any server sharing the store
  (requests/resumption.py);
- a prompt is answered once: a second answer is refused saying who answered first,
  also when two arrive together (the first claims the prompt as it is admitted);
- a question a peer relayed here and then answered or closed there is taken back by a
  request of the server's own (`withdraw_relayed`, answers/withdrawal.py);
- a conversation is its owner's (store/owners.py): a message, diff, merge or
  discard naming another person's context is "not found", as another's task is;
- a new task reserves what its turn may cost of its person's day's budget
  (cost/budgets.py), given back if its request fails before the turn starts
  (turns/reservations.py); a person whose day is spent or held is refused, and the
  refusal is audited;
- a listed task whose branch was merged or discarded since its turn says so in its
  `worktree.state` (bridge/conversations/fates.py).

This class is the thin place where the SDK's `on_*` hooks are overridden; each rule
lives in a module of its own: requests/admission.py (what a message passes before a
turn), answers/judging.py (which prompt an answer is for, and whether its sender may
give it), conversations/ownership.py, conversations/operations.py (merge, diff,
discard, the list), requests/peer_tasks.py (tasks another server runs) and
requests/task_starts.py (the quick send). Who sent a message is read here, once, as
its Requester (answers/requester.py), and handed to admission and the operations,
which hand it to the judge and to ownership's owner scope; the executor gets the same
value back from the call context.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator

from a2a.server.agent_execution import SimpleRequestContextBuilder
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.tasks import PushNotificationConfigStore
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import A2AError, InvalidParamsError, TaskNotCancelableError

from tailagent.bridge.answers import withdrawal
from tailagent.bridge.answers.requester import requester_of
from tailagent.bridge.conversations.fates import mark
from tailagent.bridge.conversations.operations import ConversationOperations
from tailagent.bridge.conversations.sessions import SessionPool
from tailagent.bridge.conversations.workplace import Isolated, Shared, requested_operation
from tailagent.bridge.requests.admission import Admission, ended
from tailagent.bridge.requests.in_flight import TurnGate
from tailagent.bridge.requests.peer_tasks import PeerTasks, runs_elsewhere
from tailagent.bridge.requests.quick import QuickTurns
from tailagent.bridge.requests.resumption import Resumption, last_seen
from tailagent.bridge.requests.task_starts import TaskStarts
from tailagent.bridge.turns import reservations
from tailagent.bridge.turns.executor import BridgeExecutor
from tailagent.card.builder import for_caller
from tailagent.cluster.placement import Placement
from tailagent.config import AgentSettings, AttachmentSettings, WorkspaceSettings
from tailagent.config.tool_rules import Rule
from tailagent.cost.budgets import Spending
from tailagent.delegation.outbound import TurnIdentity
from tailagent.store.audit import AuditLog
from tailagent.store.events import TaskEvents
from tailagent.store.finality import ENDED_STATES
from tailagent.store.owners import ConversationOwners
from tailagent.store.sdk_stores import OwnerUser
from tailagent.store.signals import TaskSignals
from tailagent.store.tasks import UNSEEN_UNTIL_SETTLED, CoalescingTaskStore
from tailagent.webhooks.targets import PushRefused, PushTargets

log = logging.getLogger(__name__)


class GuardedRequestHandler(DefaultRequestHandler):
    """a2a-sdk's handler with tailagent's rules applied in each hook (see the module's note)."""

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
        events: TaskEvents | None = None,
        placement: Placement | None = None,
    ) -> None:
        conversations = conversations or Shared("not configured")
        self._gate = TurnGate(max_concurrent_turns)
        self._push_targets = push_targets
        builder = SimpleRequestContextBuilder(
            should_populate_referred_tasks=False,
            task_store=None,
            task_id_generator=store.minted,
            context_id_generator=pool.minted_contexts,
        )
        super().__init__(
            executor,
            store,
            card,
            push_config_store=push_configs,
            extended_agent_card=extended_card,
            extended_card_modifier=self._for_caller,
            request_context_builder=builder,
        )
        self._store = store
        self._executor = executor
        self._quick = QuickTurns(executor, store)
        self._rules = rules
        self.placement = placement  # the server keeps its row fresh and drains it
        self._admission = Admission(
            store, pool, executor.judge, owners, conversations,
            attachment_limits=attachment_limits or AttachmentSettings(),
            max_worktrees_per_caller=max_worktrees_per_caller, spending=spending, audit=audit,
            placement=placement,
        )  # fmt: skip
        self._operations = ConversationOperations(conversations, owners, pool, store)
        self._peers = PeerTasks(store, signals)
        self._starts = TaskStarts(self._quick, self._gate, builder, store, pool)
        self._conversations = conversations
        self._resumption = Resumption(store, events) if events is not None else None
        self._spending = spending

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        page = await super().on_list_tasks(params, context)
        await mark(self._conversations, page.tasks)  # a branch merged or discarded since
        return page

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
        return await self._peers.cancel(params.id, elsewhere, context)

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        made = await super().on_create_task_push_notification_config(params, context)
        await self._peers.push_config_added(params.task_id, context)
        return made

    async def cancel_for_peer(self, task_id: str, owner: str) -> None:
        """Cancels a task this server runs, as another server sharing the store asked."""
        await self.on_cancel_task(
            CancelTaskRequest(id=task_id), ServerCallContext(user=OwnerUser(owner))
        )

    async def withdraw_relayed(self, turn: TurnIdentity, request_id: str) -> None:
        """Takes back the relayed question `request_id` that the task of `turn` waits
        on, its peer having answered or closed it (answers/withdrawal.py): a request of
        the server's own, past admission, whose checks are for what callers send."""
        context = ServerCallContext(
            user=OwnerUser(turn.owner), state={withdrawal.WITHDRAWING: request_id}
        )
        message = withdrawal.message(turn.task_id, turn.context_id, request_id)
        config = SendMessageConfiguration(return_immediately=True)
        try:
            async with self._gate.turn():
                await super().on_message_send(
                    SendMessageRequest(message=message, configuration=config), context
                )
        except A2AError as exc:  # the task ended meanwhile: nothing waits to be told
            log.info("task %s: question %s not taken back: %s", turn.task_id, request_id, exc)

    async def _reject_unsafe_push_url(self, url: str) -> None:
        try:
            await self._push_targets.resolve(url)
        except PushRefused as exc:
            raise InvalidParamsError(message=str(exc)) from None

    async def _for_caller(self, card: AgentCard, context: ServerCallContext) -> AgentCard:
        caller = requester_of(context).caller
        if caller is None:
            return card
        roles = sorted(caller.roles)
        applying = [r.describe() for r in self._rules if not r.roles or set(r.roles) & caller.roles]
        return for_caller(card, caller.owner, roles, applying)

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Message | Task:
        person = requester_of(context)  # read once, here, and handed on
        operation = requested_operation(params.message)
        if operation is not None:
            return await self._operations.run(operation, params, context, person)
        try:
            await self._admission.admit(params, context, person)
            config = params.configuration
            unseen = not (
                self._store.shared
                or config.return_immediately
                or config.HasField("task_push_notification_config")
            )
            if unseen:
                context.state[UNSEEN_UNTIL_SETTLED] = True
            if unseen and not params.message.task_id and self._executor.turns_into_task(params):
                return await self._starts.quick(params, context)
            async with self._gate.turn():
                return await super().on_message_send(params, context)
        except BaseException:
            await self._failed(context)
            raise

    async def _failed(self, context: ServerCallContext) -> None:
        """What a request that failed held goes back: a prompt its answer claimed, and
        what its turn reserved of the budget, if the turn did not start."""
        self._executor.release(context)  # an answer that did not apply frees its prompt
        try:
            await reservations.withdraw(context, self._spending)
        except Exception:  # the request's own failure is the one to tell
            log.exception("giving back a failed request's reservation")

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        stored = await self._store.get(params.id, context)
        elsewhere = self._store.runs_elsewhere(stored) if stored is not None else None
        after = last_seen(context)
        if after is not None and self._resumption is not None:
            subscribe = super().on_subscribe_to_task
            live = None if elsewhere else (lambda: subscribe(params, context))
            async for event in self._resumption.follow(params.id, after, context, live):
                yield event
            return
        if elsewhere is not None:  # its events flow on that server only
            raise runs_elsewhere(
                params.id, elsewhere, "subscribe there, or read it here with GetTask.", context
            )
        async for event in super().on_subscribe_to_task(params, context):
            yield event

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        person = requester_of(context)  # read once, here, and handed on
        operation = requested_operation(params.message)
        if operation is not None:
            yield await self._operations.run(operation, params, context, person)
            return
        # A waiting task whose caller leaves still runs, as any task does; a stop leaves
        # it submitted, and the next start closes it as any unfinished task.
        waiting: Task | None = None
        try:
            stored = await self._admission.admit(params, context, person)
            if stored is None and not params.message.task_id and self._gate.full():
                waiting = stored = await self._starts.submitted(params.message, context)
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
            await self._failed(context)
            raise
