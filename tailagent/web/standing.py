"""What a task's page says of its conversation, read when the page is drawn.

A task's metadata holds its turn's end: the branch, ahead and behind, the files. That
is a snapshot: the base moves on (another conversation merged), the branch is merged or
discarded, another turn starts. What a person is told now is read now: the branch's
fate from the worktrees' records, where it stands against its base from git, and
whether the conversation is busy with a turn (then a follow-up would be refused).
"""

from __future__ import annotations

from typing import Any

from tailagent.bridge.conversations.workplace import Isolated
from tailagent.web.parts import DeskParts
from tailagent.web.views.transcript import FINAL
from tailagent.workspace import GitError, Worktree


async def worktree_of(parts: DeskParts, context_id: str) -> Worktree | None:
    """The conversation's worktree record (its path, its branch), None without one.
    A record it cannot read shows as none (the page is no place to repair it)."""
    conversations = parts.conversations
    if not isinstance(conversations, Isolated):
        return None
    try:
        return await conversations.worktrees.get(context_id)
    except GitError:
        return None


async def fate_of(parts: DeskParts, context_id: str, tree: dict[str, Any]) -> str:
    """What became of the change a turn left on its branch (`tree`, the task's
    `worktree`), in words: where its merge went, or that it was discarded; "" while the
    branch still holds it. Said only after a merge or a discard (the records'), never of
    a branch that merely went idle."""
    conversations = parts.conversations
    if not isinstance(conversations, Isolated):
        return ""
    worktrees = conversations.worktrees
    branch, commit = str(tree.get("branch") or ""), str(tree.get("commit") or "")
    try:
        fate = await worktrees.fate(context_id, branch, commit)
    except GitError:
        return ""
    if fate == "merged":
        merged = worktrees.merged(context_id)
        if context_id in parts.desk.merged:
            return parts.desk.merged[context_id]
        if merged is not None:
            return f"merged ({merged.strategy}) into {merged.base_branch} at {merged.commit[:12]}"
        return "merged"
    return "discarded (its branch is gone)" if fate == "discarded" else ""


async def standing(parts: DeskParts, context_id: str, branch: str) -> dict[str, Any] | None:
    """Where the conversation's branch stands against its base's tip now (ahead, behind,
    base, files), read from git; None when it cannot be read (the page then shows the
    turn's end, saying when that was)."""
    worktree = await worktree_of(parts, context_id)
    conversations = parts.conversations
    if worktree is None or worktree.idle or worktree.branch != branch:
        return None
    if not isinstance(conversations, Isolated):
        return None
    try:
        status = await conversations.worktrees.status(context_id)
    except (GitError, OSError):
        return None
    return {
        "ahead": status.ahead,
        "behind": status.behind,
        "base": status.base_branch,
        "files": status.files,
    }


async def busy_with(parts: DeskParts, context_id: str, task_id: str) -> str:
    """Another unfinished task of the conversation this process runs ("" for none): a
    follow-up sent now would be refused as busy, so the page offers none."""
    for held in parts.store.held():
        if held == task_id:
            continue
        loaded = await parts.store.with_owner(held)
        # A final one is let go at once: it holds nothing up.
        if loaded is not None and loaded[0].context_id == context_id:
            if loaded[0].status.state in FINAL:
                continue
            return held
    return ""
