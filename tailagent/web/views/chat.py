"""A conversation's tasks read as a chat: each turn's messages, answer and commit.

A task's page shows one turn with everything it did (tools, thinking, the plan); a
conversation's page reads as a chat does: what the person said, what the agent
answered, what it asked and who answered it, and what each turn committed, with its
per-file stat. Cut from the same entries as a task's page (transcript.py), so both
say the same thing in the same words.

Pure functions of the tasks: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from a2a.types.a2a_pb2 import Task

from tailagent.store.tasks import STARTED_AT_KEY, position
from tailagent.web.views.transcript import Entry, entries

# What a chat shows of a turn's timeline: the words, the questions, the decisions and
# what went wrong; a tool's call or the agent's thinking is on the turn's own page.
SAID = frozenset(
    {"user", "permission_request", "ask_user_question", "resumed", "error",
     "loop_protection", "server_stopped", "server_restarted", "canceled", "failed"}
)  # fmt: skip


@dataclass(frozen=True)
class Turn:
    """One task of the conversation, as its chat shows it."""

    head: dict[str, Any]  # transcript.head: its id, state, who asked, when, its worktree
    said: list[Entry]  # the person's messages, the agent's questions, who decided what
    answer: str  # the agent's answer ("" for none yet)
    commit: dict[str, Any] | None  # {"id", "files": [{"path", "added", "removed", "binary"}]}
    ask: Entry | None  # the question it waits for an answer to, if it waits


def turn_of(task: Task, owner: str) -> Turn:
    found = entries(task, owner)
    head = found[0].data
    answer = next((e.data["text"] for e in found if e.kind == "answer"), "")
    return Turn(
        head=head,
        said=[e for e in found if e.section == "timeline" and e.kind in SAID],
        answer=str(answer),
        commit=_commit(head["worktree"]),
        ask=next((e for e in found if e.kind == "ask"), None),
    )


def _commit(tree: dict[str, Any]) -> dict[str, Any] | None:
    """The turn's commit and its stat, as the bridge read them from git at its end."""
    change = tree.get("change") if isinstance(tree, dict) else None
    if not tree.get("commit") or not isinstance(change, dict):
        return None
    files = [
        {
            "path": str(f.get("path", "")),
            "added": int(f.get("added") or 0),
            "removed": int(f.get("removed") or 0),
            "binary": bool(f.get("binary")),
        }
        for f in change.get("files") or []
        if isinstance(f, dict)
    ]
    return {"id": str(tree["commit"]), "files": files}


def in_order(tasks: list[tuple[Task, str]]) -> list[Turn]:
    """The conversation's turns, first to last: by when each started, as the store
    stamped it (ISO in UTC, so it sorts as text), then by its last update."""

    def started(pair: tuple[Task, str]) -> tuple[str, tuple[int, str]]:
        task = pair[0]
        stamp = task.metadata.fields.get(STARTED_AT_KEY) if task.HasField("metadata") else None
        return (stamp.string_value if stamp is not None else ""), position(task)

    return [turn_of(task, owner) for task, owner in sorted(tasks, key=started)]
