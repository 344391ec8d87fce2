"""What became of the branch a listed task left its changes on: a list of tasks reads
a task's `worktree` as its turn's end wrote it (`+1 commit, calc.py`), and must not go
on offering a change that was merged or discarded since.

Each listed task with a branch is given its fate, from the worktrees' records only (no
git: a list of 20 tasks reads at most a few small files per conversation), as
`worktree.state`: "merged" or "discarded". A task whose branch still holds its change
gets none.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from a2a.types.a2a_pb2 import Task
from google.protobuf.json_format import MessageToDict

from tailagent.bridge.conversations.workplace import Conversations, Isolated
from tailagent.workspace.git import GitError

log = logging.getLogger(__name__)


async def fates(conversations: Conversations, tasks: Iterable[Task]) -> dict[str, str]:
    """Task id -> "merged" or "discarded", for the tasks whose branch went that way."""
    if not isinstance(conversations, Isolated):
        return {}
    found: dict[str, str] = {}
    for task in tasks:
        meta = MessageToDict(task.metadata) if task.HasField("metadata") else {}
        tree = meta.get("worktree")
        if not isinstance(tree, dict) or not tree.get("branch"):
            continue
        try:
            fate = await conversations.worktrees.fate(
                task.context_id, str(tree["branch"]), str(tree.get("commit") or "")
            )
        except GitError as exc:  # a record that cannot be read: nothing is said of it
            log.debug("task %s: its branch's fate cannot be read: %s", task.id, exc)
            continue
        if fate:
            found[task.id] = fate
    return found


async def mark(conversations: Conversations, tasks: Iterable[Task]) -> None:
    """Writes each fate into the task's `worktree.state`: for tasks that are a reply's
    own copies (a ListTasks page), never the store's."""
    listed = list(tasks)
    said = await fates(conversations, listed)
    for task in listed:
        if task.id in said:
            task.metadata.get_or_create_struct("worktree").update({"state": said[task.id]})
