"""Whose a conversation is, as the request paths check it (store/owners.py stores it).

A conversation is its owner's: a message, diff, merge or discard naming another
person's is refused in the words an unknown one gets, so whether it exists does not
leak; and a busy conversation names its task only to a caller who may read that task.
Admission and the operations both ask these questions, so they stand here, once. They
are asked of the requester's owner scope (store/tasks.py), read once where the request
entered the bridge: its person's own conversations, or anyone's for an admin.
"""

from __future__ import annotations

from a2a.server.context import ServerCallContext
from a2a.utils.errors import TaskNotFoundError

from tailagent.bridge.conversations.sessions import ContextBusy
from tailagent.store.owners import ConversationOwners
from tailagent.store.tasks import CoalescingTaskStore, OwnerScope

# What a message naming a conversation that is not the caller's may do instead.
START_ANOTHER = "; to start a conversation, leave contextId out or name another"


def not_found(context_id: str, hint: str = "") -> TaskNotFoundError:
    """The refusal of a conversation that is not the caller's: the words an unknown one
    gets, so whether it exists does not leak."""
    return TaskNotFoundError(message=f"Conversation {context_id} not found{hint}")


def refuse_unless_own(
    owner: str | None, context_id: str, scope: OwnerScope, hint: str = ""
) -> None:
    """Refuses a conversation that is not the caller's: an admin may use anyone's, but
    nobody one that nobody has started."""
    if not scope.reaches(owner):
        raise not_found(context_id, hint)


async def mine(owners: ConversationOwners, context_ids: list[str], scope: OwnerScope) -> list[str]:
    """Those of `context_ids` that the caller started (an admin's too: only theirs)."""
    return [c for c in context_ids if await owners.owner(c) == scope.owner]


async def actable(
    owners: ConversationOwners, context_ids: list[str], scope: OwnerScope
) -> list[str]:
    """Those of `context_ids` the caller may act on: its own, or, for an admin, any that
    somebody started (as `refuse_unless_own` lets through), so a short id resolves
    among exactly what the whole id would reach."""
    return [c for c in context_ids if scope.reaches(await owners.owner(c))]


async def busy(
    store: CoalescingTaskStore, context_id: str, task_id: str, context: ServerCallContext
) -> ContextBusy:
    """The refusal of a busy conversation, naming its task only to a caller who may
    read that task (an admin's turn in someone's conversation stays the admin's)."""
    readable = await store.get(task_id, context) is not None
    return ContextBusy(context_id, task_id if readable else None)
