"""A task waiting for a person outlives the server that asked.

With the desk, waits get long: a person approves from their phone an hour later, and a
deploy or a reboot may come first. So a task in input-required is left so in the store
when the server stops (gracefully or not), and the next start takes it back from there
(turns/restore.py): the question is read back from the task's own last status (its
data part says all of it), and the answer, when it comes, is given to the agent's
reloaded session as a prompt that says what was asked and what was decided, so the
work goes on rather than starting over. A task that was working at a crash is not
taken back: its turn was cut off mid-step, and resuming it blind would be unsafe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from a2a.types.a2a_pb2 import Task, TaskState
from google.protobuf.json_format import MessageToDict

from tailagent.agents.events import (
    PermissionAsked,
    PermissionOption,
    Prompting,
    Question,
    QuestionAnswers,
    QuestionAsked,
    QuestionOption,
)
from tailagent.bridge.answers.reading import ParsedAnswer
from tailagent.bridge.answers.records import AnswerRecord, answerer_text

OPTION_KINDS = ("allow_once", "allow_always", "reject_once", "reject_always")


@dataclass(frozen=True)
class Waiting:
    """A task taken back after a restart, waiting for the answer to `prompt`."""

    task_id: str
    context_id: str
    prompt: Prompting
    requested_by: str  # as the turn's commit trailer names them
    subject: str  # the first line of what was asked, for that commit
    artifacts: frozenset[str]  # the artifacts already streamed, to append to


def waiting_of(task: Task) -> Waiting | None:
    """The question a stored input-required task waits on, or None when it cannot be
    read back (then the task cannot be taken back, and fails as before)."""
    if task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
        return None
    prompt = None
    for part in task.status.message.parts:
        if part.HasField("data"):
            prompt = prompt_from(MessageToDict(part.data))
            if prompt is not None:
                break
    if prompt is None:
        return None
    metadata = MessageToDict(task.metadata) if task.HasField("metadata") else {}
    asker = metadata.get("requestedBy") or {}
    who, device = str(asker.get("who") or "unknown"), str(asker.get("device") or "")
    first = next((m for m in task.history if any(p.HasField("text") for p in m.parts)), None)
    text = " ".join(p.text for p in first.parts if p.HasField("text")) if first else ""
    return Waiting(
        task_id=task.id,
        context_id=task.context_id,
        prompt=prompt,
        requested_by=(f"{who} ({device})" if device else who)
        + (f" via {asker['via']}" if asker.get("via") else ""),  # handed here by a box
        subject=(text.strip().splitlines() or ["a turn of the agent"])[0],
        artifacts=frozenset(a.artifact_id for a in task.artifacts),
    )


def prompt_from(data: dict[str, Any]) -> Prompting | None:
    """A prompt from the data part tailagent published with it (`publish.permission_data`,
    `publish.question_data`); None for anything else."""
    try:
        if data.get("kind") == "permission_request":
            options = tuple(
                PermissionOption(str(o["optionId"]), str(o["name"]), o["kind"])
                for o in data.get("options", [])
                if o.get("kind") in OPTION_KINDS
            )
            return PermissionAsked(
                request_id=str(data["requestId"]),
                tool=str(data["toolName"]),
                input=cast("dict[str, Any]", data.get("input") or {}),
                title=str(data.get("title") or data["toolName"]),
                reason=str(data.get("decisionReason") or ""),
                options=options,
                relayed_from=str(data.get("relayedFrom") or ""),
                relayed_for=str(data.get("relayedFor") or ""),
            )
        if data.get("kind") == "ask_user_question":
            questions = tuple(
                Question(
                    question=str(q["question"]),
                    header=str(q.get("header") or ""),
                    options=tuple(
                        QuestionOption(str(o["label"]), str(o.get("description") or ""))
                        for o in q.get("options", [])
                    ),
                    multi_select=bool(q.get("multiSelect")),
                )
                for q in data["questions"]
            )
            return QuestionAsked(
                request_id=str(data["requestId"]),
                questions=questions,
                relayed_from=str(data.get("relayedFrom") or ""),
                relayed_for=str(data.get("relayedFor") or ""),
            )
    except (KeyError, TypeError, AttributeError):
        return None
    return None


def resume_text(prompt: Prompting, parsed: ParsedAnswer, record: AnswerRecord) -> str:
    """What the agent's reloaded session is told: what it asked, and what was decided."""
    who = answerer_text(record.answerer)
    intro = "While you waited for this answer, tailagent restarted, so it comes as a new message."
    if isinstance(prompt, PermissionAsked):
        asked = f"You asked for permission to use {prompt.tool}: {prompt.title}."
        if parsed.denied:
            words = f' Their words: "{parsed.reason}".' if parsed.reason else ""
            return (
                f"{intro} {asked} {who} denied it.{words} Do not do it; go on without it, "
                "or stop and say why you cannot."
            )
        return f"{intro} {asked} {who} allowed it: do it now, then go on with the task."
    answers = parsed.answer.answers if isinstance(parsed.answer, QuestionAnswers) else {}
    said = "; ".join(f'"{question}": {answer}' for question, answer in answers.items())
    return f"{intro} You asked the person questions. {who} answered: {said}. Go on with the task."


def can_wait(task: Task) -> bool:
    """Whether a task outlives a restart: it waits for an answer to a prompt the next
    start can read back (bridge/turns/restore.py). A start keeps these and a stop leaves
    them, by this one rule, so a stop ends exactly what the next start would otherwise
    close."""
    return waiting_of(task) is not None
