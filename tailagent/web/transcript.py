"""A stored A2A task, read back as what the page shows: entries, each with a key.

The task store already holds everything a turn produced (the SDK appends every
status message to the history, and artifacts to the task), so the page needs no
record of its own: the same task a `GetTask` returns is cut into entries here. An
entry's key stays the same while its content changes (a tool call that finishes,
an answer that grows, a plan replaced in place), which is what lets a live view
send only what changed (see live.py).

Pure functions of the task: no I/O, nothing A2A-specific beyond reading the proto.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from a2a.types.a2a_pb2 import Message, Role, Task, TaskState
from google.protobuf.json_format import MessageToDict

# Sections of the task page, in the order they appear.
SECTIONS = ("head", "ask", "timeline", "plan", "answer", "thinking", "diffs")
WAITING = TaskState.TASK_STATE_INPUT_REQUIRED
FINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
# Status kinds that say nothing a person reads.
QUIET_KINDS = frozenset({"started", "session_info", "result", "completed"})


@dataclass(frozen=True, slots=True)
class Entry:
    key: str
    section: str
    kind: str
    data: dict[str, Any]


def state_name(state: int) -> str:
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower().replace("_", "-")


def _text(parts: Any) -> str:
    return "".join(p.text for p in parts if p.HasField("text"))


def _data(parts: Any) -> list[dict[str, Any]]:
    found = []
    for part in parts:
        if part.HasField("data"):
            value = MessageToDict(part.data)
            if isinstance(value, dict):
                found.append(value)
    return found


def _meta(message: Message) -> dict[str, Any]:
    return MessageToDict(message.metadata) if message.HasField("metadata") else {}


def _when(message_or_task: Any) -> str:
    status = getattr(message_or_task, "status", None)
    if status is not None and status.HasField("timestamp"):
        return str(status.timestamp.ToJsonString())
    return ""


def first_prompt(task: Task) -> str:
    """The first line of what the caller asked: the task's title everywhere."""
    for message in task.history:
        if message.role == Role.ROLE_USER:
            text = _text(message.parts).strip()
            if text:
                return text.splitlines()[0]
            data = _data(message.parts)
            return str(data[0])[:200] if data else "(no text)"
    return "(no prompt)"


def _meta_of(task: Task) -> dict[str, Any]:
    return MessageToDict(task.metadata) if task.HasField("metadata") else {}


def requester(task: Task, owner: str) -> dict[str, str]:
    """Who started the task: the login (or tags) and the device, as the executor
    stamped them at its start; the store's owner name when it did not."""
    by = _meta_of(task).get("requestedBy")
    if isinstance(by, dict):
        return {"who": str(by.get("who", owner)), "device": str(by.get("device", ""))}
    return {"who": owner.partition(":")[2] or owner, "device": ""}


def head(task: Task, owner: str) -> dict[str, Any]:
    status = task.status
    reason = _text(status.message.parts) if status.HasField("message") else ""
    return {
        "task_id": task.id,
        "context_id": task.context_id,
        "state": state_name(status.state),
        "title": first_prompt(task),
        "updated": _when(task),
        "final": status.state in FINAL,
        "waiting": status.state == WAITING,
        "reason": reason if status.state in FINAL else "",
        "worktree": _meta_of(task).get("worktree") or {},
        **requester(task, owner),
    }


def _question(task: Task) -> dict[str, Any] | None:
    """The pending prompt's data part, when the task waits for an answer."""
    if task.status.state != WAITING or not task.status.HasField("message"):
        return None
    message = task.status.message
    for data in _data(message.parts):
        if data.get("kind") in ("permission_request", "ask_user_question"):
            return {**data, "prompt": _text(message.parts), "task_id": task.id}
    return {"kind": "free_text", "prompt": _text(message.parts), "task_id": task.id}


def _timeline(task: Task) -> list[Entry]:
    entries: dict[str, Entry] = {}
    messages = list(task.history)
    if task.status.HasField("message"):
        messages.append(task.status.message)
    seen_ids: set[str] = set()
    prompts = 0
    for message in messages:
        if message.message_id in seen_ids:
            continue
        seen_ids.add(message.message_id)
        key = f"m:{message.message_id}"
        if message.role == Role.ROLE_USER:
            prompts += 1
            entries[key] = Entry(
                key,
                "timeline",
                "user",
                {
                    "text": _text(message.parts),
                    "data": _data(message.parts),
                    "first": prompts == 1,
                },
            )
            continue
        meta = _meta(message)
        kind = str(meta.get("kind", "status"))
        if kind in QUIET_KINDS:
            continue
        if kind in ("tool_use", "tool_result"):
            tool_id = str(meta.get("toolCallId", message.message_id))
            tool_key = f"tool:{tool_id}"
            before = entries.get(tool_key)
            data: dict[str, Any] = dict(before.data) if before else {"status": "running"}
            for item in _data(message.parts):
                if kind == "tool_use":
                    data["title"] = item.get("title") or item.get("toolName", "")
                    data["tool"] = item.get("toolName", "")
                    data["input"] = item.get("input")
                else:
                    data["output"] = item.get("output")
            if kind == "tool_result":
                data["status"] = str(meta.get("status", "completed"))
            data.setdefault("title", _text(message.parts))
            entries[tool_key] = Entry(tool_key, "timeline", "tool", data)
            continue
        entries[key] = Entry(key, "timeline", kind, {"text": _text(message.parts), "meta": meta})
    return list(entries.values())


def _artifacts(task: Task) -> list[Entry]:
    found: list[Entry] = []
    for artifact in task.artifacts:
        name = artifact.artifact_id
        if name == "response":
            found.append(Entry("answer", "answer", "answer", {"text": _text(artifact.parts)}))
        elif name == "thinking":
            found.append(Entry("thinking", "thinking", "thinking", {"text": _text(artifact.parts)}))
        elif name == "plan":
            steps = [step for d in _data(artifact.parts) for step in d.get("entries") or []]
            found.append(Entry("plan", "plan", "plan", {"entries": steps}))
        elif name.startswith("diff:"):
            path = artifact.name or name.removeprefix("diff:")
            diff = {"path": path, "diff": _text(artifact.parts)}
            found.append(Entry(f"diff:{path}", "diffs", "diff", diff))
        else:
            other = {"name": artifact.name or name, "text": _text(artifact.parts),
                     "data": _data(artifact.parts)}  # fmt: skip
            found.append(Entry(f"artifact:{name}", "answer", "artifact", other))
    return found


def entries(task: Task, owner: str) -> list[Entry]:
    """Every entry of the task page, in display order within each section."""
    found = [Entry("head", "head", "head", head(task, owner))]
    question = _question(task)
    if question is not None:
        found.append(Entry("ask", "ask", "ask", question))
    return found + _timeline(task) + _artifacts(task)


@dataclass(frozen=True, slots=True)
class Row:
    """One task in the list."""

    task_id: str
    state: str
    title: str
    who: str
    device: str
    updated: str
    waiting: bool


def row(task: Task, owner: str) -> Row:
    who = requester(task, owner)
    return Row(
        task.id,
        state_name(task.status.state),
        first_prompt(task),
        who["who"],
        who["device"],
        _when(task),
        task.status.state == WAITING,
    )
