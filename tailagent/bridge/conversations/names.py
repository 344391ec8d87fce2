"""The conversation a name in a message means: a whole id, or the start people type.

People see 8-character ids (the branch `tailagent/<short id>`, `conversations`,
`tasks`, `call`'s "merge 8d12805e" hint) and type them back, into diff, merge and
discard and into a message's contextId (`call --context`). Taken as a new name, such
a start once made a conversation whose id was the start itself, hiding the real one
behind its own short id from then on. So a name that is no conversation's whole id
means the one conversation it starts (or whose branch it names) among those the
caller may act on; and a new conversation may not take a name that starts another's
id, so a short id always leads to the conversation it was handed out for.
"""

from __future__ import annotations

from a2a.server.context import ServerCallContext
from a2a.utils.errors import InvalidParamsError

from tailagent.bridge.conversations.ownership import actable, mine, not_found
from tailagent.bridge.conversations.workplace import Isolated, Shared
from tailagent.store.owners import ConversationOwners
from tailagent.workspace.worktrees import BRANCH_PREFIX

SHOWN = 5  # of the conversations a start fits, the refusal names this many

# What a message naming the start of others' conversations may do instead.
START_NO_OTHER = (
    ": it is the start of another conversation's id, which a new one's may not be; to "
    "start a conversation, leave contextId out or name it otherwise"
)


async def resolve(
    name: str,
    owners: ConversationOwners,
    conversations: Isolated | Shared,
    context: ServerCallContext,
) -> str:
    """The conversation `name` means: itself when it is a conversation's whole id; else
    the one the caller may act on (its own, or anyone's for an admin) whose branch is
    `tailagent/<name>`, else whose id starts with it; else `name` unchanged (unknown, or
    new). Others' conversations are no candidates to anyone but an admin. Refuses a
    start that fits several, naming them, so nobody acts on a guess."""
    if await owners.owner(name) is not None:
        return name
    found = await actable(owners, _by_branch(name, conversations), context)
    if not found:
        starting = await owners.starting_with(name.removeprefix(BRANCH_PREFIX))
        found = await actable(owners, starting, context)
    if len(found) > 1:
        own = len(await mine(owners, found, context)) == len(found)
        whose = "your conversations" if own else "the conversations you may act on"
        more = ", …" if len(found) > SHOWN else ""
        raise InvalidParamsError(
            message=f"{name} is the start of {len(found)} of {whose} "
            f"({', '.join(found[:SHOWN])}{more}): give more of its id"
        )
    return found[0] if found else name


async def refuse_a_start(name: str, owners: ConversationOwners) -> None:
    """Refuses `name` for a new conversation when it starts another's id (which
    `resolve` found none of the caller's to mean): as not found, in the words another
    person's whole id gets, and saying why a name this new may not be taken."""
    if await owners.starting_with(name):
        raise not_found(name, START_NO_OTHER)


def _by_branch(name: str, conversations: Isolated | Shared) -> list[str]:
    """The conversations here whose branch is `tailagent/<name>` (`tailagent/` optional):
    the short id `tasks` and `conversations` show, which a clash of starts made longer
    (`8d12805e-2`) and which may not be the start of its id."""
    if not isinstance(conversations, Isolated):
        return []
    short = name.removeprefix(BRANCH_PREFIX)
    return sorted(c for c, b in conversations.worktrees.known().items() if short and b == short)
