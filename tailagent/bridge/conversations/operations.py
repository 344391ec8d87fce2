"""The operations on a conversation a message asks for instead of a turn: `merge`,
`diff`, `discard`, and the list of the caller's conversations.

They run on the conversation's worktree (bridge/conversations/workplace.py), not
through the agent: no task is made, and the answer is one message. Who may run which,
on which conversation, and when (never while a turn runs in it) changes with the
worktrees' operations, not with the rules that admit a turn.
"""

from __future__ import annotations

import uuid
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import Message, Role, SendMessageRequest
from a2a.utils.errors import InvalidParamsError, InvalidRequestError, UnsupportedOperationError

from tailagent.bridge.answers.requester import Requester
from tailagent.bridge.conversations.names import resolve
from tailagent.bridge.conversations.ownership import busy, mine, refuse_unless_own
from tailagent.bridge.conversations.sessions import SessionPool
from tailagent.bridge.conversations.workplace import Isolated, Refused, Shared, listing, operate
from tailagent.bridge.parts import data_part, text_part
from tailagent.cluster.carry import carry_to
from tailagent.store.owners import ConversationOwners
from tailagent.store.tasks import CoalescingTaskStore, OwnerScope


def _reply(kind: str, text: str, data: dict[str, Any], context_id: str = "") -> Message:
    """An operation's answer: its text for a person, its data for a program."""
    reply = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_AGENT,
        context_id=context_id,
        parts=[text_part(text), data_part(data)],
    )
    reply.metadata.update({"kind": kind})
    return reply


class ConversationOperations:
    """Runs the operations a message asks for on the caller's conversations."""

    def __init__(
        self,
        conversations: Isolated | Shared,
        owners: ConversationOwners,
        pool: SessionPool,
        store: CoalescingTaskStore,
    ) -> None:
        self._conversations = conversations
        self._owners = owners
        self._pool = pool
        self._store = store

    async def run(
        self,
        operation: dict[str, Any],
        params: SendMessageRequest,
        context: ServerCallContext,
        person: Requester,
    ) -> Message:
        """A merge, discard or diff of a conversation: `person`'s own (or any, for an
        admin), never while a turn runs in it; merge and discard need the approver role.
        Or the list of the person's conversations."""
        kind = operation["kind"]
        if kind == "conversations":
            return await self._conversation_list(context, person.scope)
        if not params.message.context_id:
            raise InvalidParamsError(message=f"a {kind} names its conversation: set contextId")
        # Its id, or the start of one (the short id its branch shows): see names.py.
        context_id = await resolve(params.message.context_id, self._owners,
                                   self._conversations, person.scope)  # fmt: skip
        refuse_unless_own(await self._owners.owner(context_id), context_id, person.scope)
        home = await self._store.contexts.home_elsewhere(context_id)
        if home is not None and carry_to(context.state, home):
            # Its worktree is there (cluster/carry.py): that box runs the operation.
            raise UnsupportedOperationError(message=f"Conversation {context_id} lives on {home}.")
        who = person.owner if person.caller else "this caller"
        if kind != "diff" and not person.may("approver"):
            raise InvalidRequestError(
                message=f"{who} may not {kind} conversations (it lacks the approver role)"
            )
        holder = self._pool.holder(context_id)
        if holder is not None and kind != "diff":
            refusal = await busy(self._store, context_id, holder, context)
            raise UnsupportedOperationError(message=f"{refusal.running}: let it finish, or "
                                            f"cancel it, before a {kind}")  # fmt: skip
        try:
            text, data = await operate(self._conversations, context_id, operation)
        except Refused as exc:
            raise UnsupportedOperationError(message=str(exc)) from None
        if kind in ("merge", "discard") and not operation.get("dryRun"):
            # Its agent session works in the directory just removed (or kept as it was):
            # the next turn opens it again in the conversation's directory of then.
            await self._pool.discard(context_id)
        return _reply(kind, text, data, context_id)

    async def _conversation_list(self, context: ServerCallContext, scope: OwnerScope) -> Message:
        """The caller's conversations with a worktree (or a merge) here: `tailagent
        conversations`."""
        known = self._conversations.worktrees.known() if isinstance(
            self._conversations, Isolated) else {}  # fmt: skip
        owned = await mine(self._owners, list(known), scope)
        holders = {}
        for context_id in owned:
            if (task_id := self._pool.holder(context_id)) is not None:
                # Named to a caller who may read it (an admin's turn stays the admin's).
                readable = await self._store.get(task_id, context) is not None
                holders[context_id] = task_id if readable else ""
        try:
            text, data = await listing(self._conversations, owned, holders)
        except Refused as exc:
            raise UnsupportedOperationError(message=str(exc)) from None
        return _reply("conversations", text, data)
