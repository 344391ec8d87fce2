"""The rules a message passes before a turn starts, and the conversation it enters.

They run before a2a-sdk opens the task's event stream, so a refusal touches nothing
but the request that was refused: attachments within limits, a mode the caller may
ask for, a follow-up to a task that can take one (the SDK's own words for a task it
does not know), a person within their day's budget and their number of worktrees,
a conversation that is the caller's and not busy, and last the prompt an answer
claims. They change with what a person may start, not with how a turn then runs.

Whether a follow-up answers a prompt, which, and whether its sender may give it is
asked of answers' one door (bridge/answers/judging.py): `judge` among a follow-up's
checks, `hold` last; admission keeps only the order in which refusals come. Who sends
is read once, where the request entered the bridge, and handed in as its Requester.
"""

from __future__ import annotations

import uuid

from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import Message, SendMessageRequest, Task, TaskState
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError
from google.protobuf.json_format import MessageToDict

from tailagent.agents.modes import mode_refusal
from tailagent.bridge.answers.judging import AnswerJudge
from tailagent.bridge.answers.requester import Requester
from tailagent.bridge.conversations.names import resolve
from tailagent.bridge.conversations.ownership import START_ANOTHER, busy, refuse_unless_own
from tailagent.bridge.conversations.sessions import SessionPool
from tailagent.bridge.conversations.workplace import Isolated, Shared
from tailagent.bridge.requests.peer_tasks import runs_elsewhere
from tailagent.bridge.turns import attachments, reservations
from tailagent.cluster.carry import carry_to, may_carry
from tailagent.cluster.placement import Placement
from tailagent.config import AttachmentSettings
from tailagent.cost.budgets import OverBudget, Spending
from tailagent.store.audit import AuditEntry, AuditLog
from tailagent.store.finality import BUSY_STATES, ENDED_STATES
from tailagent.store.owners import ConversationOwners
from tailagent.store.tasks import CoalescingTaskStore


def ended(task: Task) -> str:
    """How a task ended, as people say it: `completed`, `been canceled`."""
    word = TaskState.Name(task.status.state).removeprefix("TASK_STATE_").lower()
    return "been " + word if word in ("canceled", "rejected") else word


class Admission:
    """Admits a message to a turn, or refuses it saying why (see the module's note)."""

    def __init__(
        self,
        store: CoalescingTaskStore,
        pool: SessionPool,
        answers: AnswerJudge,
        owners: ConversationOwners,
        conversations: Isolated | Shared,
        *,
        attachment_limits: AttachmentSettings,
        max_worktrees_per_caller: int,
        spending: Spending | None,
        audit: AuditLog | None,
        placement: Placement | None = None,
    ) -> None:
        """`placement` places new conversations among the boxes of a shared store
        (None: every one starts here)."""
        self._store = store
        self._pool = pool
        self._answers = answers
        self._owners = owners
        self._conversations = conversations
        self._attachment_limits = attachment_limits
        self._max_worktrees = max_worktrees_per_caller
        self._spending = spending
        self._audit = audit
        self._placement = placement

    async def admit(
        self, params: SendMessageRequest, context: ServerCallContext, person: Requester
    ) -> Task | None:
        """Applies the pre-turn rules to `person`'s message; returns the stored task a
        follow-up names."""
        message = params.message
        self._check_parts_and_mode(message, person)
        stored: Task | None = None
        if message.task_id:
            stored = await self._store.get(message.task_id, context)
            if stored is None:
                return None  # the SDK answers TaskNotFound in its own words
            self._check_follow_up(message, stored, person, context)
        if not message.task_id:
            # Work for another box goes there first: its own rules, budget included, apply.
            if message.context_id:
                await self._carry_to_home(message, context, person)
            else:
                await self._place(context)
            await self._check_budget(message, context, person)  # before a new one is named
        await self._enter_conversation(message, person)
        await self._check_free(message, context)
        if message.task_id:
            # Last, and with no await since the task was read: the check and the
            # claim are one step on the event loop.
            self._answers.hold(message.task_id, person, context)
        return stored

    def _check_parts_and_mode(self, message: Message, person: Requester) -> None:
        """Refuses attachments past the limits, and a mode only an admin may ask for."""
        limits = self._attachment_limits
        try:
            attachments.check(message, limits.max_part_bytes, limits.max_message_bytes,
                              limits.url_hosts)  # fmt: skip
        except attachments.AttachmentRefused as exc:
            raise InvalidParamsError(message=str(exc)) from None
        mode = MessageToDict(message.metadata).get("mode") if message.HasField("metadata") else None
        if isinstance(mode, str) and mode and not person.may("admin"):
            refusal = mode_refusal(mode, self._pool.caller_modes)
            if refusal is not None:
                raise InvalidParamsError(message=refusal)

    def _check_follow_up(
        self, message: Message, stored: Task, person: Requester, context: ServerCallContext
    ) -> None:
        """Refuses a follow-up its task cannot take; binds it to the task's conversation
        and prompt, and renames a messageId the task already holds (the SDK's
        de-duplication would drop a second turn's words from the history)."""
        elsewhere = self._store.runs_elsewhere(stored)
        if elsewhere is not None:
            raise runs_elsewhere(
                message.task_id,
                elsewhere,
                "send follow-ups for it there. Any of the servers can read or cancel it.",
                context,
            )
        if message.context_id and message.context_id != stored.context_id:
            raise InvalidParamsError(
                message=(
                    f"Task {message.task_id} is in conversation {stored.context_id}, not "
                    f"{message.context_id}: leave contextId out of a follow-up"
                )
            )
        message.context_id = stored.context_id
        self._answers.judge(message, stored, person)  # before "still working": it says more
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
        if any(m.message_id == message.message_id for m in stored.history):
            message.metadata.update({"originalMessageId": message.message_id})
            message.message_id = f"{message.message_id}~{uuid.uuid4().hex[:8]}"

    async def _place(self, context: ServerCallContext) -> None:
        """Hands a new conversation to the sibling with room for it, when that is
        not this box (cluster/placement.py); it is carried there for the person."""
        if self._placement is None:
            return
        home = await self._placement.elsewhere()
        if home is not None and carry_to(context.state, home):
            raise UnsupportedOperationError(
                message=f"This box is busier than {home}: the new conversation starts there."
            )

    async def _carry_to_home(
        self, message: Message, context: ServerCallContext, person: Requester
    ) -> None:
        """A new message in a conversation another box ran (its worktree is there):
        carried there for the person (cluster/carry.py), once the conversation is known
        to be theirs; a request that cannot be carried goes on here as before."""
        if not may_carry(context.state):
            return
        # Resolved once: the admission's own look-up then meets the whole id.
        context_id = message.context_id = await resolve(
            message.context_id, self._owners, self._conversations, person.scope
        )
        home = await self._store.contexts.home_elsewhere(context_id)
        if home is None:
            return
        refuse_unless_own(await self._owners.owner(context_id), context_id, person.scope,
                          START_ANOTHER)  # fmt: skip
        conversations = self._conversations
        if isinstance(conversations, Isolated) and await self._home_gone(conversations, home):
            conversations.continue_here(context_id)  # from its last shared commit
            return
        carry_to(context.state, home)
        raise UnsupportedOperationError(message=f"Conversation {context_id} lives on {home}.")

    async def _home_gone(self, conversations: Isolated, home: str) -> bool:
        """Whether a conversation whose box is `home` goes on here: that box is gone
        (cluster/placement.py) and its commits were pushed where this box can take them
        (workspace.shared_repository). Without them it stays refused, naming the box."""
        if self._placement is None or not conversations.worktrees.hands_over:
            return False
        return await self._placement.gone(home)

    async def _check_free(self, message: Message, context: ServerCallContext) -> None:
        """Refuses a conversation a turn of another task runs in, here or on another
        server sharing the store."""
        holder = self._pool.holder(message.context_id)
        if holder is not None and holder != message.task_id:
            raise UnsupportedOperationError(
                message=str(await busy(self._store, message.context_id, holder, context))
            )
        if holder is None and not message.task_id:
            running = await self._store.contexts.busy_elsewhere(message.context_id)
            if running is not None:
                carry_to(context.state, running[1])  # its box says so, as the same words
                refusal = await busy(self._store, message.context_id, running[0], context)
                raise UnsupportedOperationError(
                    message=f"{refusal} (It runs on another tailagent server: {running[1]}.)"
                )

    async def _enter_conversation(self, message: Message, person: Requester) -> None:
        """Makes sure the message's conversation is its sender's: a `contextId` is looked
        up among those the sender may act on (conversations/names.py); a new message
        starts one of the sender's (a `contextId` that names none of theirs and is nobody's
        whole id becomes theirs, whatever others' ids it starts); another person's whole
        id is refused as not found, but to an admin."""
        me = person.scope.owner
        if message.context_id:
            message.context_id = await resolve(
                message.context_id, self._owners, self._conversations, person.scope
            )
        owner = await self._owners.owner(message.context_id) if message.context_id else None
        if owner is None:
            if not person.may("admin"):
                await self._check_room(me)
            if not message.context_id:
                message.context_id = self._pool.minted_contexts.generate()
                await self._owners.start(message.context_id, me)
                return
            owner = await self._owners.claim(message.context_id, me)
        refuse_unless_own(owner, message.context_id, person.scope, START_ANOTHER)

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

    async def _check_budget(
        self, message: Message, context: ServerCallContext, person: Requester
    ) -> None:
        """Reserves what a new task's turn may cost of its person's day's budget
        (turns/reservations.py carries it to the turn), or refuses it, saying which
        budget, what was spent and held, and when it resets; the refusal goes to the
        audit log. Admins, whose box it is, are not held to one."""
        caller = person.caller
        if self._spending is None or caller is None or person.may("admin"):
            return
        try:
            reservations.keep(context, await self._spending.admit(caller.owner))
            return
        except OverBudget as over:
            refusal = str(over)
        if self._audit is not None:
            entry = AuditEntry(
                task_id="", context_id=message.context_id, tool="budget",
                input=f"a new task for {caller.describe()}", decision="deny", reason=refusal,
                answered_by="tailagent (budget)",
            )  # fmt: skip
            await self._audit.record(entry)
        raise UnsupportedOperationError(message=refusal)
