"""The conversation a name in a message means: a whole id, or the start people type.

People see 8-character ids (the branch `tailagent/<short id>`, `conversations`,
`tasks`, `call`'s "merge 8d12805e" hint) and type them back, into diff, merge and
discard and into a message's contextId (`call --context`). Taken as a new name, such
a start once made a conversation whose id was the start itself, hiding the real one
behind its own short id from then on.

A name is looked up only among the conversations the caller may act on (its own; an
admin's, anyone's), so no answer says whether someone else's conversation exists:

1. a whole id the caller may act on is that conversation;
2. else the caller's conversation whose branch is `tailagent/<name>`, else whose id
   starts with `name` (several: refused, naming them, so nobody acts on a guess);
3. else the name is new to the caller, and a message may start a conversation by it.

Why this stays unambiguous: a short id is handed out to the person whose conversation
it is. When they type it back, step 1 or 2 finds their conversation before anything
anyone else made: someone else's conversation is never a candidate for them, even one
whose whole id is that short id. Only an admin, who may act on both, can see two; a
start that fits both is refused to them naming both, and a whole id means itself
(every conversation stays reachable by its whole id, which is never ambiguous).
So a new conversation may take a start of another's id: it hides nothing from the
person who was handed that start. Branch names are unique per owner for the same reason
(workspace/conversation_repos/making.py): bob's conversation is `tailagent/8d12805e` even when
carol has one by that branch, so its name says nothing of hers, and step 2 finds one
conversation for each of them (for an admin, both: refused, naming both). The one name
it may not take is a whole id that is already another person's (ids are one namespace,
each held by one owner); admission refuses that as not found (ownership.py), which is
what a stranger can still learn: that an exact id they named is not theirs to use, as
docs/security.md says.
"""

from __future__ import annotations

from a2a.utils.errors import InvalidParamsError

from tailagent.bridge.conversations.ownership import actable, mine
from tailagent.bridge.conversations.workplace import Isolated, Shared
from tailagent.store.owners import ConversationOwners
from tailagent.store.tasks import OwnerScope
from tailagent.workspace.conversation_repos import BRANCH_PREFIX

SHOWN = 5  # of the conversations a start fits, the refusal names this many


async def resolve(
    name: str,
    owners: ConversationOwners,
    conversations: Isolated | Shared,
    scope: OwnerScope,
) -> str:
    """The conversation `name` means to this caller (steps 1-3 of the module's note):
    a whole id they may act on; else their one conversation whose branch is
    `tailagent/<name>`, else whose id starts with it; else `name` unchanged (unknown to
    them, or new). Refuses a start that fits several of theirs, naming them."""
    if await actable(owners, [name], scope):
        return name
    found = await actable(owners, _by_branch(name, conversations), scope)
    if not found:
        starting = await owners.starting_with(name.removeprefix(BRANCH_PREFIX))
        found = await actable(owners, starting, scope)
    if len(found) > 1:
        own = len(await mine(owners, found, scope)) == len(found)
        whose = "your conversations" if own else "the conversations you may act on"
        more = ", …" if len(found) > SHOWN else ""
        raise InvalidParamsError(
            message=f"{name} is the start of {len(found)} of {whose} "
            f"({', '.join(found[:SHOWN])}{more}): give more of its id"
        )
    return found[0] if found else name


def _by_branch(name: str, conversations: Isolated | Shared) -> list[str]:
    """The conversations here whose branch is `tailagent/<name>` (`tailagent/` optional):
    the short id `tasks` and `conversations` show, which a clash of starts among one
    owner's conversations made longer (`8d12805e-2`) and which may not be the start of
    its id. Several people's conversations may have it: the caller's are picked after."""
    if not isinstance(conversations, Isolated):
        return []
    short = name.removeprefix(BRANCH_PREFIX)
    return sorted(c for c, b in conversations.worktrees.known().items() if short and b == short)
