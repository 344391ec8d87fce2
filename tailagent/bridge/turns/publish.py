"""The mapping table of DESIGN.md: one agent event -> the A2A events a caller sees.

Every status message carries `metadata.kind`, so a client never has to guess what
a piece of text is from the text itself.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from a2a.helpers import new_task_from_user_message
from a2a.server.events import EventQueue
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import Message, Part, Role, TaskState

from tailagent.agents.events import (
    AgentEvent,
    FileChanged,
    Notice,
    PermissionAsked,
    Plan,
    QuestionAsked,
    SessionInfo,
    Text,
    Thought,
    ToolFinished,
    ToolStarted,
    TurnDone,
)
from tailagent.bridge.parts import data_part, text_part

RESPONSE_ARTIFACT = "response"
THINKING_ARTIFACT = "thinking"
PLAN_ARTIFACT = "plan"
DIFF_MEDIA_TYPE = "text/x-diff"


async def open_task(message: Message, task_id: str, context_id: str, queue: EventQueue) -> None:
    """Enqueues the new Task of a first turn: a2a-sdk wants it before any update."""
    task = new_task_from_user_message(message)
    task.id, task.context_id = task_id, context_id
    await queue.enqueue_event(task)


def permission_prompt_text(event: PermissionAsked) -> str:
    return f"Permission requested: {event.title or event.tool}"


def question_prompt_text(event: QuestionAsked) -> str:
    return "\n".join(q.question for q in event.questions)


def permission_data(event: PermissionAsked) -> dict[str, Any]:
    """The prompt's data part; `relayedFrom` names the peer whose agent asked, only on a
    prompt relayed from another box, so the desk and the push say whose question it is,
    and `relayedFor` the one person who may answer it (kept across a restart)."""
    return {
        "kind": "permission_request",
        "requestId": event.request_id,
        "toolName": event.tool,
        "input": event.input,
        "title": event.title,
        "decisionReason": event.reason,
        "options": [{"optionId": o.id, "name": o.name, "kind": o.kind} for o in event.options],
        **relayed(event),
    }


def relayed(event: PermissionAsked | QuestionAsked) -> dict[str, str]:
    """Whose question a relayed prompt is, for its data part; nothing for this box's own."""
    if not event.relayed_from:
        return {}
    return {"relayedFrom": event.relayed_from, "relayedFor": event.relayed_for}


def question_data(event: QuestionAsked) -> dict[str, Any]:
    return {
        "kind": "ask_user_question",
        "requestId": event.request_id,
        "questions": [
            {
                "question": q.question,
                "header": q.header,
                "options": [{"label": o.label, "description": o.description} for o in q.options],
                "multiSelect": q.multi_select,
            }
            for q in event.questions
        ],
        **relayed(event),
    }


class Publisher:
    """Publishes one task's events; remembers what this task has streamed so far.

    It outlives a single `execute()` call: a turn that pauses on a question and
    resumes keeps appending to the same response artifact.
    """

    def __init__(
        self, task_id: str, context_id: str, continuing: frozenset[str] = frozenset()
    ) -> None:
        """`continuing`: artifacts the task streamed before (a task taken back after a
        restart), which its next chunks extend rather than replace."""
        self.task_id = task_id
        self.context_id = context_id
        self._started: set[str] = set(continuing)
        self._answer: list[str] = []
        self._tool_titles: dict[str, str] = {}

    def message(self, parts: list[Part], kind: str, **metadata: Any) -> Message:
        msg = Message(
            message_id=uuid.uuid4().hex,
            role=Role.ROLE_AGENT,
            task_id=self.task_id,
            context_id=self.context_id,
            parts=parts,
        )
        msg.metadata.update({"kind": kind, **metadata})
        return msg

    async def status(
        self,
        updater: TaskUpdater,
        state: TaskState,
        kind: str,
        parts: list[Part] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        message = self.message(parts, kind, **(metadata or {})) if parts else None
        await updater.update_status(
            state, message=message, metadata={"kind": kind, **(metadata or {})}
        )

    async def _chunk(self, updater: TaskUpdater, artifact_id: str, part: Part) -> None:
        append = artifact_id in self._started
        self._started.add(artifact_id)
        await updater.add_artifact(
            [part], artifact_id=artifact_id, name=artifact_id, append=append, last_chunk=False
        )

    async def publish(self, updater: TaskUpdater, event: AgentEvent) -> None:
        """Publishes a non-pausing event (everything but prompts and the turn's end)."""
        working = TaskState.TASK_STATE_WORKING
        match event:
            case Text(text=text):
                self._answer.append(text)
                await self._chunk(updater, RESPONSE_ARTIFACT, text_part(text))
            case Thought(text=text):
                await self._chunk(updater, THINKING_ARTIFACT, text_part(text))
            case Plan(entries=entries):
                self._started.add(PLAN_ARTIFACT)
                listing = "\n".join(f"[{_mark(e.status)}] {e.content}" for e in entries)
                entries_data = [dataclasses.asdict(e) for e in entries]
                await updater.add_artifact(
                    [text_part(listing), data_part({"kind": "plan", "entries": entries_data})],
                    artifact_id=PLAN_ARTIFACT,
                    name=PLAN_ARTIFACT,
                    append=False,
                    last_chunk=True,
                )
            case ToolStarted(id=tool_id, name=name, title=title, input=tool_input):
                self._tool_titles[tool_id] = title or name
                await self.status(
                    updater,
                    working,
                    "tool_use",
                    [
                        text_part(f"Calling tool {title or name}"),
                        data_part(
                            {
                                "toolCallId": tool_id,
                                "toolName": name,
                                "title": title,
                                "input": tool_input,
                            }
                        ),
                    ],
                    {"toolName": name, "toolCallId": tool_id},
                )
            case ToolFinished(id=tool_id, status=status, output=output):
                title = self._tool_titles.pop(tool_id, tool_id)
                parts = [text_part(f"{title}: {status}")]
                if output:
                    parts.append(
                        data_part({"toolCallId": tool_id, "status": status, "output": output})
                    )
                await self.status(
                    updater,
                    working,
                    "tool_result",
                    parts,
                    {"toolCallId": tool_id, "status": status},
                )
            case FileChanged(path=path, diff=diff):
                await updater.add_artifact(
                    [text_part(diff, DIFF_MEDIA_TYPE)],
                    artifact_id=f"diff:{path}",
                    name=path,
                    metadata={"kind": "diff", "path": path},
                    append=False,
                    last_chunk=True,
                )
            case Notice(text=text):
                await self.status(updater, working, "notice", [text_part(text)])
            case SessionInfo(mode=mode, commands=commands):
                info: dict[str, Any] = {}
                if mode is not None:
                    info["currentMode"] = mode
                if commands is not None:
                    info["availableCommands"] = list(commands)
                await updater.update_status(working, metadata={"kind": "session_info", **info})
            case _:
                raise TypeError(f"{type(event).__name__} is not a streaming event")

    async def ask(
        self, updater: TaskUpdater, event: PermissionAsked | QuestionAsked, note: str = ""
    ) -> None:
        if isinstance(event, PermissionAsked):
            kind, prompt, data = (
                "permission_request",
                permission_prompt_text(event),
                permission_data(event),
            )
        else:
            kind, prompt, data = (
                "ask_user_question",
                question_prompt_text(event),
                question_data(event),
            )
        text = f"{note}\n{prompt}" if note else prompt
        await self.status(
            updater,
            TaskState.TASK_STATE_INPUT_REQUIRED,
            kind,
            [text_part(text), data_part(data)],
            {"requestId": event.request_id},
        )

    async def finish(
        self, updater: TaskUpdater, event: TurnDone, extra: dict[str, Any], close: bool = True
    ) -> None:
        """The turn's answer, then its end. `close`: a stream may be reading the answer,
        which is then closed."""
        if close and RESPONSE_ARTIFACT in self._started:
            # The closing chunk carries no parts: it only marks the stream complete.
            await updater.add_artifact(
                [],
                artifact_id=RESPONSE_ARTIFACT,
                name=RESPONSE_ARTIFACT,
                append=True,
                last_chunk=True,
            )
        outcome = {"stopReason": event.stop_reason, "usage": event.usage, **extra}
        if event.cost is not None:
            outcome["costUsd"] = event.cost
        await self.status(
            updater,
            TaskState.TASK_STATE_WORKING,
            "result",
            [text_part("".join(self._answer))],
            outcome,
        )
        await updater.update_status(
            TaskState.TASK_STATE_COMPLETED, metadata={"kind": "completed", **outcome}
        )

    async def fail(self, updater: TaskUpdater, reason: str, kind: str = "error") -> None:
        await self.status(updater, TaskState.TASK_STATE_FAILED, kind, [text_part(reason)])


def _mark(status: str) -> str:
    return {"completed": "x", "in_progress": ">"}.get(status, " ")
