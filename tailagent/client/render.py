"""Live rendering of an A2A event stream for a person at a terminal.

Reads only the A2A wire shapes (and tailagent's `metadata.kind` conventions), so
it renders any A2A agent, not just tailagent. Everything in a stream is the agent's
(or a caller's) text: it is shown as text, never as rich markup, and with its
control characters escaped (tailagent.output.visible), so it cannot act on the terminal.
"""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    StreamResponse,
    Task,
    TaskState,
    TaskStatusUpdateEvent,
)
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message as ProtoMessage
from google.protobuf.struct_pb2 import Struct
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from tailagent.client.turn_change import FileChange, turn_change
from tailagent.output.visible import visible
from tailagent.process.origin import invoked_as

if TYPE_CHECKING:  # rich's Syntax brings pygments' lexers: imported once a diff shows
    from rich.syntax import Syntax

# A word and a separator an agent puts before the part of a prompt's id that differs.
KIND_LABEL = re.compile(r"[A-Za-z]+[-_]")
FINAL_STATES = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}
PAUSED_STATES = {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}


class OutputConsole(Console):
    """A console whose reader may go away (`tailagent call … | head -1`). Rich's own
    answer, an exit with code 1 from wherever the write was, would escape an asyncio
    task as a "Task exception was never retrieved" traceback: here the write raises
    BrokenPipeError, as print() does, for the command to end with 141 (cli.run)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more is written, nor flushed at exit
        raise BrokenPipeError("whoever read the output stopped reading")


def message_text(message: Message) -> str:
    return "\n".join(p.text for p in message.parts if p.HasField("text"))


def message_data(message: Message) -> list[dict[str, Any]]:
    items = [MessageToDict(p.data) for p in message.parts if p.HasField("data")]
    return [item for item in items if isinstance(item, dict)]


def metadata_of(message: Message) -> dict[str, Any]:
    return MessageToDict(message.metadata) if message.HasField("metadata") else {}


def state_name(state: int) -> str:
    """A task state as people write it: `input-required`, `completed`."""
    return TaskState.Name(state).removeprefix("TASK_STATE_").lower().replace("_", "-")


@dataclass
class Prompt:
    """A pause the caller must answer, as the agent described it."""

    kind: str
    text: str
    data: dict[str, Any]

    @property
    def request_id(self) -> str | None:
        value = self.data.get("requestId")
        return value if isinstance(value, str) else None


@dataclass
class Outcome:
    """What the stream came to, as far as this client saw."""

    task_id: str = ""
    context_id: str = ""
    state: int = TaskState.TASK_STATE_UNSPECIFIED
    status_text: str = ""
    prompt: Prompt | None = None
    direct_message: str | None = None
    worktree: dict[str, Any] = field(default_factory=dict)  # the conversation's branch
    cost: dict[str, Any] = field(default_factory=dict)  # the task's, as the server kept it
    conversation_cost: dict[str, Any] = field(default_factory=dict)
    # The number of the last event seen (metadata.sequence): where a dropped stream is
    # taken up again (follow.py). 0: none seen, or a server that numbers none.
    sequence: int = 0

    @property
    def unfinished(self) -> bool:
        """The stream ended with the task neither done nor waiting for an answer."""
        if self.direct_message is not None:
            return False
        return self.state not in FINAL_STATES and self.state not in PAUSED_STATES

    def observe(self, event: StreamResponse) -> None:
        if event.HasField("task"):
            self.task_id, self.context_id = event.task.id, event.task.context_id
            self._status(event.task.status.state, event.task.status.message)
            self._worktree(event.task.metadata if event.task.HasField("metadata") else None)
        elif event.HasField("status_update"):
            update = event.status_update
            self.task_id, self.context_id = update.task_id, update.context_id
            self._status(update.status.state, update.status.message)
            self._worktree(update.metadata if update.HasField("metadata") else None)
        elif event.HasField("message"):
            self.direct_message = message_text(event.message)
            self.context_id = event.message.context_id
        self.sequence = max(self.sequence, sequence_of(event) or 0)

    def _worktree(self, metadata: Struct | None) -> None:
        """Where the turn's changes went, as the server said at its end."""
        meta = json_of(metadata) if metadata is not None else {}
        tree = meta.get("worktree")
        if isinstance(tree, dict):
            self.worktree = tree
        for key, name in (("cost", "cost"), ("conversationCost", "conversation_cost")):
            if isinstance(meta.get(key), dict):
                setattr(self, name, meta[key])

    def _status(self, state: int, message: Message) -> None:
        self.state = state
        self.status_text = message_text(message)
        self.prompt = None
        if state in PAUSED_STATES:
            data = next(iter(message_data(message)), {})
            kind = str(metadata_of(message).get("kind") or data.get("kind") or "input")
            self.prompt = Prompt(kind, self.status_text, data)


def sequence_of(event: StreamResponse) -> int | None:
    """The number a status or artifact update carries (store/events.py), if any."""
    which = event.WhichOneof("payload")
    if which not in ("status_update", "artifact_update"):
        return None
    found = getattr(event, which).metadata.fields.get("sequence")
    return int(found.number_value) if found is not None else None


def status_event(task: Task) -> StreamResponse:
    """A task's current status as the stream event that renders it (with the task's
    metadata: the branch its changes went to)."""
    update = TaskStatusUpdateEvent(
        task_id=task.id, context_id=task.context_id, status=task.status, metadata=task.metadata
    )
    return StreamResponse(status_update=update)


def json_of(message: ProtoMessage) -> dict[str, Any]:
    """A protobuf message as JSON, with whole numbers as integers: A2A's metadata is a
    protobuf Struct, whose numbers are all doubles (`"ahead": 1.0` would be the count
    of commits a script reads)."""
    found = _whole(MessageToDict(message))
    return found if isinstance(found, dict) else {}


def _whole(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: _whole(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole(item) for item in value]
    return value


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class Changes:
    """What a conversation's branch holds after a turn, and the commands that act on it
    (the conversation named by the short id its branch shows)."""

    branch: str
    ahead: int
    behind: int
    base: str
    files: list[str]
    conversation: str
    diff: str
    merge: str

    @classmethod
    def of(cls, outcome: Outcome, target_args: list[str]) -> Changes | None:
        """None unless the task ended with changes on its conversation's branch."""
        tree = outcome.worktree
        branch, files = str(tree.get("branch") or ""), [str(f) for f in tree.get("files") or []]
        ahead, behind = int(tree.get("ahead") or 0), int(tree.get("behind") or 0)
        if outcome.state not in FINAL_STATES or not branch or not (ahead or files):
            return None
        # `tailagent/<the context id's first 8 characters>`, unless another branch had it.
        short = branch.rpartition("/")[2]
        known = bool(short) and outcome.context_id.startswith(short)
        conversation = short if known else outcome.context_id
        diff, merge = (
            shlex.join([*invoked_as(), verb, conversation, *target_args])
            for verb in ("diff", "merge")
        )
        base = str(tree.get("base") or "")
        return cls(branch, ahead, behind, base, files, conversation, diff, merge)

    def lines(self, width: int) -> list[str]:
        """`changes on BRANCH (+N commits, FILES) — DIFF · MERGE` in `width` columns: the
        files listed as far as they fit, the commands (to be copied) never cut, each
        on a line of its own when the line would be too long."""
        head = self._head(width - len(" —"))
        commands = f"{self.diff} · {self.merge}"
        if cell_len(f"{head} — {commands}") <= width:
            return [f"{head} — {commands}"]
        if cell_len(f"  {commands}") <= width:
            return [f"{head} —", f"  {commands}"]
        return [f"{head} —", f"  {self.diff}", f"  {self.merge}"]

    def _head(self, width: int) -> str:
        counts = [f"+{_count(self.ahead, 'commit')}"] if self.ahead else []
        if self.behind:
            counts.append(f"{self.behind} behind {visible(self.base, one_line=True)}")
        files = [visible(f, one_line=True) for f in self.files]
        branch = visible(self.branch, one_line=True)
        for shown in range(len(files), -1, -1):  # as many files named as fit
            rest = len(files) - shown
            more = [_count(rest, "more file" if shown else "file")] if rest else []
            head = f"changes on {branch} ({', '.join(counts + files[:shown] + more)})"
            if cell_len(head) <= width:
                break
        return head

    def as_json(self) -> dict[str, Any]:
        return {
            "branch": self.branch, "base": self.base, "ahead": self.ahead,
            "behind": self.behind, "files": self.files, "context": self.conversation,
            "diff": self.diff, "merge": self.merge,
        }  # fmt: skip


def request_start(request_id: str) -> str:
    """The start of a prompt's id that tells it from the task's later prompts: 8
    characters past a kind an agent puts first (`delegate-`, `toolu_`), which is the
    same in each of them."""
    kind = KIND_LABEL.match(request_id)
    return request_id[: (kind.end() if kind else 0) + 8]


def reply_command(target_args: list[str], outcome: Outcome, prompt: Prompt) -> list[str]:
    """The exact command lines that answer `prompt`. A follow-up naming its task keeps
    the task's conversation, so no --context; `target_args` is what else the call
    needs to reach the same agent (empty for the one it finds by itself). The task and
    the prompt are named by the starts of their ids, which `call` takes back whole
    (client/addressing.py): the lines fit an 80-column terminal."""
    base = ["--task", outcome.task_id[:8]]
    if prompt.request_id:
        base += ["--request", request_start(prompt.request_id)]
    base += target_args
    if prompt.kind == "ask_user_question":
        question = (prompt.data.get("questions") or [{}])[0]
        label = ((question.get("options") or [{}])[0]).get("label", "ANSWER")
        answer = f"{question.get('question', 'QUESTION')}={label}"
        return [shlex.join([*invoked_as(), "call", "--answer", answer, *base])]
    return [shlex.join([*invoked_as(), "call", word, *base]) for word in ("allow", "deny")]


def question_options(prompt: Prompt) -> dict[str, list[str]]:
    """Each question of a prompt, with the labels that answer it."""
    return {
        str(q.get("question", "")): [str(o.get("label", "")) for o in q.get("options") or []]
        for q in prompt.data.get("questions") or []
    }


class Renderer:
    def __init__(self, console: Console, target_args: list[str] | None = None) -> None:
        self.console = console
        self.target_args = target_args or []
        self._mid_line = False
        self._headed: set[str] = set()  # tasks whose header is printed (once per call)
        self._reported: dict[str, str] = {}  # path -> the diff the agent reported
        self._changed: set[str] = set()  # tasks whose change is printed (once)

    def _line(self, text: str, style: str = "") -> None:
        """One line (or more) of text that holds the agent's words: shown escaped."""
        self._show(Text(visible(text), style))

    def _prose(self, text: str, style: str) -> None:
        """A notice of tailagent's own, wrapped to the terminal (this console leaves long
        lines to it, for the agent's words): a conversation's start names two folders."""
        width = max(self.console.width, 20)
        wrapped = [piece for line in visible(text).split("\n") for piece in textwrap.wrap(
            line, width, subsequent_indent="  ", break_on_hyphens=False) or [""]]  # fmt: skip
        self._show(Text("\n".join(wrapped), style))

    def _show(self, renderable: Text | Syntax) -> None:
        if self._mid_line:
            self.console.print()
            self._mid_line = False
        self.console.print(renderable)

    def event(self, event: StreamResponse, outcome: Outcome) -> None:
        if event.HasField("task"):
            if event.task.id not in self._headed:
                self._headed.add(event.task.id)
                self._line(f"task {event.task.id}  context {event.task.context_id}", "dim")
        elif event.HasField("artifact_update"):
            self._artifact(event.artifact_update.artifact, event.artifact_update.append)
        elif event.HasField("status_update"):
            state = event.status_update.status.state
            if state in FINAL_STATES:
                self._turn_change(outcome)
            elif state in PAUSED_STATES:  # what it reported so far, before it asks
                self._files(turn_change({}, self._reported))
                self._reported = {}
            self._status(state, event.status_update.status.message)
        elif event.HasField("message"):
            self._line(message_text(event.message))

    def _artifact(self, artifact: Artifact, append: bool) -> None:
        texts = "".join(p.text for p in artifact.parts if p.HasField("text"))
        if artifact.artifact_id == "response":
            self.console.print(visible(texts), end="", markup=False, highlight=False)
            self._mid_line = (bool(texts) and not texts.endswith("\n")) or self._mid_line
        elif artifact.artifact_id == "thinking":
            self._line(f"[thinking] {texts}", "dim italic")
        elif artifact.artifact_id == "plan":
            self._line("[plan]", "bold")
            for line in texts.splitlines():
                self._line("  " + line, "cyan")
        elif artifact.artifact_id.startswith("diff:"):
            # The agent's account of an edit: shown at the turn's end, beside (or, for a
            # file its commit does not hold, after) what the turn committed.
            path = artifact.name or artifact.artifact_id.removeprefix("diff:")
            self._reported[path] = (self._reported.get(path, "") if append else "") + texts
        else:
            self._line(f"[{artifact.name or artifact.artifact_id}] {texts}")

    def _turn_change(self, outcome: Outcome) -> None:
        """What the turn changed, as it ends: its commit file by file, then what the
        agent reported of files the commit does not hold (see turn_change.py)."""
        if outcome.task_id in self._changed:
            return
        self._changed.add(outcome.task_id)
        self._files(turn_change(outcome.worktree, self._reported))
        self._reported = {}
        cut = outcome.worktree.get("change")
        if isinstance(cut, dict) and cut.get("cut"):
            found = Changes.of(outcome, self.target_args)
            whole = f"`{found.diff}`" if found is not None else "`tailagent diff`"
            self._show(Text(f"(the diff is cut here: {whole} shows it whole)", "dim"))

    def _files(self, changes: list[FileChange]) -> None:
        """Each file's head line (fitted to the terminal), then its diff."""
        for change in changes:
            self._show(Text(change.head(self.console.width), "bold"))
            if change.diff:
                from rich.syntax import Syntax

                shown = visible(change.diff.rstrip("\n"))
                self._show(Syntax(shown, "diff", theme="ansi_dark", background_color="default"))
            elif change.past_end:
                self._show(Text("  (past the end of the diff shown here)", "dim"))

    def _status(self, state: int, message: Message) -> None:
        kind = metadata_of(message).get("kind")
        text = message_text(message)
        if state == TaskState.TASK_STATE_WORKING:
            if kind == "tool_use":
                self._line(f"· {text}", "blue")
            elif kind == "tool_result":
                ok = metadata_of(message).get("status") != "failed"
                self._line(f"{'✓' if ok else '✗'} {text}", "green" if ok else "red")
                for item in message_data(message):
                    if item.get("output"):
                        self._line("  " + str(item["output"]).rstrip(), "dim")
            elif kind == "notice":
                self._prose(f"! {text}", "yellow")
            elif kind == "resumed" and text:  # who decided the prompt, from where
                denied = metadata_of(message).get("decision") == "deny"
                self._line(f"» {text}", "red" if denied else "green")
        elif state in FINAL_STATES:
            name = state_name(state)
            style = "green" if state == TaskState.TASK_STATE_COMPLETED else "red"
            self._line(f"[{name}] {text}".rstrip() if kind != "result" else f"[{name}]", style)

    def changes(self, outcome: Outcome) -> None:
        """Where the task's changes went and what to do with them: the call's last line."""
        found = Changes.of(outcome, self.target_args)
        for line in found.lines(self.console.width) if found is not None else []:
            self._show(Text(line, "cyan"))

    def prompt(self, outcome: Outcome, *, replies: bool = True) -> None:
        """The pause, its details and choices once each; then, unless answering in the
        terminal, the commands that answer it."""
        prompt = outcome.prompt
        if prompt is None:
            return
        self._line(f"[input-required] {prompt.text}", "bold yellow")
        if prompt.kind == "permission_request":
            if prompt.data.get("input"):
                self._line(f"  input: {json.dumps(prompt.data['input'])}", "dim")
            options = prompt.data.get("options") or []
            if options:
                names = ", ".join(f"option:{o.get('optionId')} ({o.get('name')})" for o in options)
                self._line(f"  options: {names}", "dim")
        questions = question_options(prompt)
        for question, labels in questions.items():
            if labels:
                # One question is the prompt's own text: its options suffice.
                lead = "options" if len(questions) == 1 else question
                self._line(f"  {lead}: {', '.join(labels)}", "dim")
        if not replies:
            return
        self._line("reply with:", "bold")
        for line in reply_command(self.target_args, outcome, prompt):
            self._line("  " + line)
