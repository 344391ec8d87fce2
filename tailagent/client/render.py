"""Live rendering of an A2A event stream for a person at a terminal.

Reads only the A2A wire shapes (and tailagent's `metadata.kind` conventions), so
it renders any A2A agent, not just tailagent. Everything in a stream is the agent's
(or a caller's) text: it is shown as text, never as rich markup, and with its
control characters escaped (tailagent.visible), so it cannot act on the terminal.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Any

from a2a.types.a2a_pb2 import (
    Artifact,
    Message,
    StreamResponse,
    Task,
    TaskState,
    TaskStatusUpdateEvent,
)
from google.protobuf.json_format import MessageToDict
from rich.console import Console
from rich.syntax import Syntax
from rich.text import Text

from tailagent.origin import invoked_as
from tailagent.visible import visible

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
        elif event.HasField("status_update"):
            update = event.status_update
            self.task_id, self.context_id = update.task_id, update.context_id
            self._status(update.status.state, update.status.message)
        elif event.HasField("message"):
            self.direct_message = message_text(event.message)
            self.context_id = event.message.context_id

    def _status(self, state: int, message: Message) -> None:
        self.state = state
        self.status_text = message_text(message)
        self.prompt = None
        if state in PAUSED_STATES:
            data = next(iter(message_data(message)), {})
            kind = str(metadata_of(message).get("kind") or data.get("kind") or "input")
            self.prompt = Prompt(kind, self.status_text, data)


def status_event(task: Task) -> StreamResponse:
    """A task's current status as the stream event that renders it."""
    update = TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id, status=task.status)
    return StreamResponse(status_update=update)


def reply_command(target_args: list[str], outcome: Outcome, prompt: Prompt) -> list[str]:
    """The exact command lines that answer `prompt`. A follow-up naming its task keeps
    the task's conversation, so no --context; `target_args` is what else the call
    needs to reach the same agent (empty for the one it finds by itself)."""
    base = ["--task", outcome.task_id]
    if prompt.request_id:
        base += ["--request", prompt.request_id]
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

    def _line(self, text: str, style: str = "") -> None:
        """One line (or more) of text that holds the agent's words: shown escaped."""
        self._show(Text(visible(text), style))

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
            self._status(event.status_update.status.state, event.status_update.status.message)
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
            self._line(f"[{artifact.name}]", "bold")
            shown = visible(texts)
            self._show(Syntax(shown, "diff", theme="ansi_dark", background_color="default"))
        else:
            self._line(f"[{artifact.name or artifact.artifact_id}] {texts}")

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
                self._line(f"! {text}", "yellow")
            elif kind == "resumed" and text:  # who decided the prompt, from where
                denied = metadata_of(message).get("decision") == "deny"
                self._line(f"» {text}", "red" if denied else "green")
        elif state in FINAL_STATES:
            name = state_name(state)
            style = "green" if state == TaskState.TASK_STATE_COMPLETED else "red"
            self._line(f"[{name}] {text}".rstrip() if kind != "result" else f"[{name}]", style)

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
