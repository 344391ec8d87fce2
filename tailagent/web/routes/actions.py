"""The desk's forms that drive tasks: start one, follow one up, answer it, cancel it.

Each is a POST with a form token, sent through the A2A request handler as the caller
(so A2A's roles, ownership and answer rules hold), and answered with a redirect to the
page to see next. What a decision form stands for in A2A (`_answer_message`) changes
with the answer rules (DESIGN.md, "Answers"), not with the pages.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from a2a.types.a2a_pb2 import CancelTaskRequest, Message, Part, Task, TaskState
from a2a.utils.errors import A2AError
from quart import Blueprint, Response, redirect
from quart.typing import ResponseReturnValue

from tailagent.access.identity import Caller
from tailagent.web.caller import call_context, current_caller
from tailagent.web.route_kit import DeskKit, Refused, data_part, user_message
from tailagent.web.views import render
from tailagent.web.views.transcript import Entry, entries

# How long an answer's redirect waits for the task's page to show the answer taken
# (live.Desk.answering): the turn usually resumes within milliseconds.
ANSWER_SHOWN_WITHIN = 5.0


def register_forms(desk_bp: Blueprint, kit: DeskKit) -> None:
    """Adds the POSTs that start, follow up, answer and cancel tasks."""

    @desk_bp.post("/tasks")
    async def new_task() -> ResponseReturnValue:
        caller = current_caller()
        text = _text_of(await kit.form(caller, "send"), "say what the agent should do")
        task = await kit.send(caller, user_message(text))
        return redirect(f"/desk/tasks/{task.id}", 303)

    @desk_bp.post("/tasks/<task_id>/follow")
    async def follow_up(task_id: str) -> ResponseReturnValue:
        caller = current_caller()
        posted = await kit.form(caller, "follow", task_id)
        text = _text_of(posted, "say what comes next")
        task = await kit.visible_task(caller, task_id)
        follow = await kit.send(caller, user_message(text, context_id=task.context_id))
        return redirect(_back(posted, follow.id), 303)

    @desk_bp.post("/tasks/<task_id>/answer")
    async def answer(task_id: str) -> ResponseReturnValue:
        caller = current_caller()
        posted = await kit.form(caller, "answer", task_id)
        task = await kit.visible_task(caller, task_id)
        message = _answer_message(posted)
        message.task_id, message.context_id = task.id, task.context_id
        # A task another box runs changes there: this desk's live view is not told, so
        # the redirect waits for the store to show the answer taken instead.
        elsewhere = kit.parts.store.runs_elsewhere(task) is not None
        try:
            async with (
                _taken_elsewhere(kit, caller, task)
                if elsewhere
                else kit.parts.desk.answering(task_id, ANSWER_SHOWN_WITHIN)
            ):
                await kit.send(caller, message)
        except Refused:
            request_id = (posted.get("requestId") or [""])[0]
            decided = await _decision_of(kit, task_id, request_id)
            if decided is None:
                raise
            page = render.outcome(
                "Already answered", "This request was answered already:",
                f"/desk/tasks/{task_id}", kit.viewer(caller), decision=decided,
            )  # fmt: skip
            return Response(page, status=409, content_type="text/html; charset=utf-8")
        return redirect(_back(posted, task_id), 303)

    @desk_bp.post("/tasks/<task_id>/cancel")
    async def cancel(task_id: str) -> ResponseReturnValue:
        caller = current_caller()
        await kit.form(caller, "cancel", task_id)
        request_ = CancelTaskRequest(id=task_id)
        try:
            await kit.parts.handler.on_cancel_task(request_, call_context(caller))
        except A2AError as exc:
            raise Refused(409, exc.message or type(exc).__name__) from None
        return redirect(f"/desk/tasks/{task_id}", 303)


@contextlib.asynccontextmanager
async def _taken_elsewhere(kit: DeskKit, caller: Caller, task: Task) -> AsyncIterator[None]:
    """Around an answer carried to the box that runs the task: on a normal exit, waits
    (at most ANSWER_SHOWN_WITHIN) until the store no longer shows the task waiting (a
    question asked at once after is then shown after that wait)."""
    yield
    deadline = asyncio.get_running_loop().time() + ANSWER_SHOWN_WITHIN
    while asyncio.get_running_loop().time() < deadline:
        now = await kit.parts.store.get(task.id, call_context(caller))
        if now is None or now.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
            return
        await asyncio.sleep(0.05)


async def _decision_of(kit: DeskKit, task_id: str, request_id: str) -> Entry | None:
    """The decision already taken on a request of the task, as its entry (the stale
    answer's page shows who came first in the task's own words)."""
    loaded = await kit.parts.store.with_owner(task_id)
    if not request_id or loaded is None:
        return None
    return next((e for e in entries(*loaded) if e.kind == "resumed"
                 and e.data.get("request_id") == request_id), None)  # fmt: skip


def _back(posted: dict[str, list[str]], task_id: str) -> str:
    """Where a form's person goes next: the page it was sent from (the list, or the
    conversation's page, as its `back` says), else the task's own page."""
    back = (posted.get("back") or [""])[0]
    if back == "list":
        return "/desk/"
    if back == "conversation":
        return f"/desk/tasks/{task_id}/conversation"
    return f"/desk/tasks/{task_id}"


def _text_of(posted: dict[str, list[str]], hint: str) -> str:
    text = (posted.get("text") or [""])[0].strip()
    if not text:
        raise Refused(400, f"the message is empty: {hint}")
    return text


def _answer_message(posted: dict[str, list[str]]) -> Message:
    """The A2A answer a decision form stands for (DESIGN.md, "Answers")."""
    choice = (posted.get("choice") or [""])[0]
    request_id = (posted.get("requestId") or [""])[0]
    note = (posted.get("message") or [""])[0].strip()
    message = user_message()
    if request_id:
        message.metadata.update({"requestId": request_id})
    data: dict[str, Any] | None = None
    if choice.startswith("option:"):
        message.parts.append(Part(text=choice))
    elif choice in ("allow", "deny", "deny-message"):
        if choice == "deny-message" and not note:
            raise Refused(400, "write the message to deny with, or choose another button")
        decision = "allow" if choice == "allow" else "deny"
        data = {"kind": "permission_response", "decision": decision, "requestId": request_id}
        if decision == "deny" and note:
            data["reason"] = note
    elif choice == "answers":
        answers = {}
        for key, values in posted.items():
            if key.startswith("q") and key[1:].isdigit():
                picked = posted.get(f"a{key[1:]}", [])
                if not picked:
                    raise Refused(400, f"choose an answer to: {values[0]}")
                answers[values[0]] = ", ".join(picked)
        data = {"answers": answers, "requestId": request_id}
    elif choice == "text":
        if not note:
            raise Refused(400, "write your answer in words, or choose one of the answers")
        message.parts.append(Part(text=note))  # a question's first, as the CLI's words are
    else:
        raise Refused(400, "this form has no answer in it")
    if data is not None:
        message.parts.append(data_part(data))
    return message
