"""A stored A2A task, read back as what the page shows: entries, each with a key.

The task store already holds everything a turn produced (the SDK appends every
status message to the history, and artifacts to the task), so the page needs no
record of its own: the same task a `GetTask` returns is cut into entries here. An
entry's key stays the same while its content changes (a tool call that finishes,
an answer that grows, a plan replaced in place), which is what lets a live view
send only what changed (see live.py).

The entries read as a conversation: what the person asked, what the agent says and
asks, and who decided what, in words. The protocol's own vocabulary (an answer's
`permission_response` data, `option:allow_once`, request ids) stays in the data.

Pure functions of the task: no I/O, nothing A2A-specific beyond reading the proto.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from a2a.types.a2a_pb2 import Message, Role, Task, TaskState
from google.protobuf.json_format import MessageToDict

from tailagent.cost.figures import dollars, shown_usd
from tailagent.output.titles import first_prompt, shorten
from tailagent.store.tasks import SERVER_URL_KEY, STARTED_AT_KEY
from tailagent.web.views.turn_changes import shown

# Sections of the task page, in the order they appear.
SECTIONS = ("head", "ask", "timeline", "plan", "answer", "diffs", "follow")
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
ASK_KINDS = ("permission_request", "ask_user_question")
SUBJECT_CHARS = 200  # a command or question inside a sentence
# Details the bridge fills in itself when a person gave none: a decision says them already.
_SILENT_DETAILS = ("no reason given",)
_OPTION = re.compile(r"\s*option:\S+\s*")


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


def _meta_of(task: Task) -> dict[str, Any]:
    return MessageToDict(task.metadata) if task.HasField("metadata") else {}


def _who_of_owner(owner: str) -> str:
    """A store owner (`user:alice@example.com`, `token:ci`, `tags:tag:a`) as the bridge
    signs a decision (`alice@example.com`, `token:ci`, `tag:a`), so one name fits both."""
    kind, _, name = owner.partition(":")
    return owner if kind == "token" else name or owner


def requester(task: Task, owner: str) -> dict[str, str]:
    """Who started the task: the login (or tags) and the device, as the executor
    stamped them at its start; the store's owner name when it did not."""
    by = _meta_of(task).get("requestedBy")
    if isinstance(by, dict):
        return {"who": str(by.get("who", owner)), "device": str(by.get("device", ""))}
    return {"who": _who_of_owner(owner), "device": ""}


def turn_changed(meta: dict[str, Any]) -> bool:
    """Whether the task's turn left anything on its conversation's branch (a commit, or
    the branch ahead of its base, or files changed): a turn that changed nothing has
    nothing to merge or discard, and its page says nothing of either."""
    tree = meta.get("worktree")
    if not isinstance(tree, dict) or not tree.get("branch"):
        return False
    return bool(tree.get("commit") or int(tree.get("ahead") or 0) or tree.get("files"))


def cost_of(task: Task) -> str:
    """What the task cost and its conversation so far ("" when the agent reported none)."""
    meta = _meta_of(task)
    usd = shown_usd(meta.get("cost"))
    if usd <= 0:
        return ""
    total = shown_usd(meta.get("conversationCost"))
    return f"{dollars(usd)} (conversation {dollars(total)})" if total > usd else dollars(usd)


def head(task: Task, owner: str) -> dict[str, Any]:
    status = task.status
    reason = _text(status.message.parts) if status.HasField("message") else ""
    meta = _meta_of(task)
    return {
        "task_id": task.id,
        "context_id": task.context_id,
        "state": state_name(status.state),
        "title": first_prompt(task),
        "started": str(meta.get(STARTED_AT_KEY, "")),
        "updated": _when(task),
        "final": status.state in FINAL,
        "completed": status.state == TaskState.TASK_STATE_COMPLETED,
        "waiting": status.state == WAITING,
        "reason": reason if status.state in FINAL else "",
        "worktree": meta.get("worktree") or {},
        "changed": turn_changed(meta),
        "cost": cost_of(task),
        **requester(task, owner),
    }


def subject(data: dict[str, Any]) -> dict[str, str]:
    """What a request is about, for a sentence: the command it would run (shown as
    code), else its title (agent Markdown), else the question asked."""
    if data.get("kind") == "ask_user_question":
        asked = [str(q.get("question", "")) for q in data.get("questions") or []]
        return {"question": shorten(" · ".join(a for a in asked if a), SUBJECT_CHARS)}
    tool_input = data.get("input")
    command = tool_input.get("command") if isinstance(tool_input, dict) else None
    if isinstance(command, str) and command.strip():
        return {"code": shorten(command.strip(), SUBJECT_CHARS)}
    title = str(data.get("title") or data.get("toolName") or "a step")
    return {"text": shorten(title, SUBJECT_CHARS)}


def _question(task: Task) -> dict[str, Any] | None:
    """The pending prompt's data part, when the task waits for an answer."""
    if task.status.state != WAITING or not task.status.HasField("message"):
        return None
    message = task.status.message
    for data in _data(message.parts):
        if data.get("kind") in ASK_KINDS:
            return {**data, "prompt": _text(message.parts), "task_id": task.id,
                    "subject": subject(data)}  # fmt: skip
    prompt = _text(message.parts)
    return {"kind": "free_text", "prompt": prompt, "task_id": task.id,
            "subject": {"text": shorten(prompt, SUBJECT_CHARS)}}  # fmt: skip


def is_answer(message: Message) -> bool:
    """A person's structured answer to a prompt: the decision entry that follows says it
    in words (a free-text reply is shown, as the person's own words)."""
    if any(d.get("kind") == "permission_response" or "answers" in d for d in _data(message.parts)):
        return True
    return bool(_OPTION.fullmatch(_text(message.parts)))


def _decision(message: Message, meta: dict[str, Any], asked: dict[str, Any]) -> dict[str, Any]:
    """Who decided what, from the resumed status's metadata (`AnswerRecord` in
    bridge/answers/records.py) and its sentence, whose words after the first `: ` are the person's
    detail."""
    _, _, detail = _text(message.parts).partition(": ")
    request = asked.get(str(meta.get("requestId", "")), {})
    return {
        "request_id": str(meta.get("requestId", "")),
        "decision": str(meta.get("decision", "answer")),
        "who": str(meta.get("answeredBy", "")),
        "device": str(meta.get("answeredFrom", "")),
        "via": str(meta.get("via", "")),
        "at": str(meta.get("answeredAt", "")),
        "detail": "" if detail in _SILENT_DETAILS or detail.startswith("chose ") else detail,
        "subject": request.get("subject") or {"text": "a request"},
    }


def _user(message: Message, first: bool, who: dict[str, str]) -> Entry:
    data = {"text": _text(message.parts), "data": _data(message.parts), "first": first}
    return Entry(f"m:{message.message_id}", "timeline", "user", {**data, **who})


def _tool(before: Entry | None, kind: str, message: Message, meta: dict[str, Any]) -> Entry:
    """A tool call's one entry, grown by its result."""
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
    key = f"tool:{meta.get('toolCallId', message.message_id)}"
    return Entry(key, "timeline", "tool", data)


def _timeline(task: Task, who: dict[str, str]) -> list[Entry]:
    entries: dict[str, Entry] = {}
    messages = list(task.history)
    if task.status.HasField("message"):
        messages.append(task.status.message)
    seen_ids: set[str] = set()
    asked: dict[str, dict[str, Any]] = {}  # request id -> what was asked
    prompts = 0
    for message in messages:
        if message.message_id in seen_ids:
            continue
        seen_ids.add(message.message_id)
        key = f"m:{message.message_id}"
        if message.role == Role.ROLE_USER:
            if prompts and is_answer(message):
                continue
            prompts += 1
            entries[key] = _user(message, prompts == 1, who)
            continue
        meta = _meta(message)
        kind = str(meta.get("kind", "status"))
        if kind in QUIET_KINDS:
            continue
        if kind in ("tool_use", "tool_result"):
            tool = _tool(entries.get(f"tool:{meta.get('toolCallId')}"), kind, message, meta)
            entries[tool.key] = tool
            continue
        data: dict[str, Any] = {"text": _text(message.parts), "meta": meta}
        if kind in ASK_KINDS:
            request = next((d for d in _data(message.parts) if d.get("kind") == kind), {})
            data["subject"] = subject(request) if request else {"text": data["text"]}
            data["relayedFrom"] = str(request.get("relayedFrom") or "")  # a peer's question
            asked[str(request.get("requestId", ""))] = data
        elif kind == "resumed":
            data = _decision(message, meta, asked)
        entries[key] = Entry(key, "timeline", kind, data)
    return list(entries.values())


def _artifacts(task: Task) -> list[Entry]:
    found: list[Entry] = []
    for artifact in task.artifacts:
        name = artifact.artifact_id
        if name == "response":
            found.append(Entry("answer", "answer", "answer", {"text": _text(artifact.parts)}))
        elif name == "thinking":
            text = _text(artifact.parts)
            found.append(Entry("thinking", "timeline", "thinking", {"text": text}))
        elif name == "plan":
            # As the agent left it: a step it left pending did not run because the
            # task ended (the CLI shows `[ ]` too), and the page must not say it did.
            steps = [step for d in _data(artifact.parts) for step in d.get("entries") or []]
            ended = task.status.state in FINAL
            found.append(Entry("plan", "plan", "plan", {"entries": steps, "ended": ended}))
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
    """Every entry of the task page, in display order. The agent's thinking is one
    artifact with no time of its own: it goes where the agent started, right after
    the prompt (a live page shows it where it first appeared, which is the same)."""
    found = [Entry("head", "head", "head", head(task, owner))]
    question = _question(task)
    if question is not None:
        found.append(Entry("ask", "ask", "ask", question))
    timeline = _timeline(task, requester(task, owner))
    artifacts = _artifacts(task)
    thinking = [e for e in artifacts if e.kind == "thinking"]
    reported = [e.data for e in artifacts if e.kind == "diff"]
    changes = [Entry(key, "diffs", "diff", data) for key, data in shown(_meta_of(task), reported)]
    return (
        found
        + timeline[:1]
        + thinking
        + timeline[1:]
        + [e for e in artifacts if e.kind not in ("thinking", "diff")]
        + changes
        + [_follow(task)]
    )


def _follow(task: Task) -> Entry:
    """What the page offers after the task: a follow-up once it has ended (a
    conversation takes one turn at a time: A2A refuses a message to a busy one), else
    what to do meanwhile. An entry, so a page open when the task ends offers it then."""
    state = task.status.state
    data = {"task_id": task.id, "final": state in FINAL, "waiting": state == WAITING}
    return Entry("follow", "follow", "follow", data)


@dataclass(frozen=True, slots=True)
class Row:
    """One task in the list; `ask` is what a waiting task asks (see `_question`)."""

    task_id: str
    state: str
    title: str
    who: str
    device: str
    updated: str
    waiting: bool
    ask: dict[str, Any] | None = None
    cost: str = ""
    change: str = ""  # what its turn left on its branch; "merged", "discarded" since
    box: str = ""  # the box that ran it, as its short name (several boxes on one store)


def change_of(task: Task) -> str:
    """What the task's turn left on its conversation's branch, as its end wrote it
    (`1 commit · calc.py`); "" when it left nothing there."""
    tree = _meta_of(task).get("worktree")
    if not isinstance(tree, dict) or not tree.get("branch"):
        return ""
    ahead, files = int(tree.get("ahead") or 0), [str(f) for f in tree.get("files") or []]
    if not (ahead or files):
        return ""
    named = ", ".join(files[:2]) + (f" and {len(files) - 2} more" if len(files) > 2 else "")
    commits = f"{ahead} commit{'' if ahead == 1 else 's'}" if ahead else "not committed"
    return f"{commits} · {named}" if named else commits


def box_of(task: Task) -> str:
    """The short name of the box that ran the task (its stamp in a store several boxes
    share): `box1` for http://box1.tail.example.ts.net."""
    url = _meta_of(task).get(SERVER_URL_KEY)
    host = urlsplit(url).hostname if isinstance(url, str) else None
    return host.split(".")[0] if host else ""


def row(task: Task, owner: str) -> Row:
    who = requester(task, owner)
    question = _question(task)
    return Row(
        task.id,
        state_name(task.status.state),
        first_prompt(task),
        who["who"],
        who["device"],
        _when(task),
        task.status.state == WAITING,
        question,
        cost_of(task),
        change_of(task),
        box_of(task),
    )
