"""The desk's merge: a task's conversation squashed into its base branch.

It acts on the conversation's worktree, not on a task, and its outcome is a page of
its own: what was merged, or a conflict with the request to send the agent (worded by
the worktrees' refusal, which is why the two change together and apart from the forms).
"""

from __future__ import annotations

import re

from a2a.types.a2a_pb2 import Message, SendMessageRequest
from a2a.utils.errors import A2AError
from quart import Blueprint, Response
from quart.typing import ResponseReturnValue

from tailagent.web import forms, render
from tailagent.web.caller import call_context, current_caller
from tailagent.web.route_kit import DeskKit, Refused, data_part, status_of, user_message

# How a merge conflict's refusal words the request to send the agent (worktrees/errors.py).
SUGGESTED = re.compile(r'ask the agent: "(.+)"\s*$', re.DOTALL)


def register_merge(desk_bp: Blueprint, kit: DeskKit) -> None:
    """Adds `/desk/tasks/<id>/merge`."""

    @desk_bp.post("/tasks/<task_id>/merge")
    async def merge(task_id: str) -> ResponseReturnValue:
        """Squashes the task's conversation into its base branch (A2A's merge message)."""
        caller = current_caller()
        await kit.form(caller, "merge", task_id)
        task = await kit.visible_task(caller, task_id)
        merge_part = data_part({"kind": "merge", "strategy": "squash"})
        request_ = user_message(merge_part, context_id=task.context_id)
        back = f"/desk/tasks/{task_id}"
        try:
            reply = await kit.parts.handler.on_message_send(
                SendMessageRequest(message=request_), call_context(caller)
            )
        except A2AError as exc:
            said = exc.message or type(exc).__name__
            suggested = SUGGESTED.search(said)
            if suggested is None:
                raise Refused(status_of(exc), said) from None
            token = forms.make(kit.parts.secret, caller.owner, "follow", task_id)
            follow = {"action": f"{back}/follow", "text": suggested.group(1), "token": token}
            page = render.outcome(
                "Merge conflict", said, back, kit.viewer(caller), follow_up=follow
            )
            return Response(page, status=409, content_type="text/html; charset=utf-8")
        said = "".join(p.text for p in reply.parts) if isinstance(reply, Message) else ""
        kit.parts.desk.merged[task.context_id] = said
        page = render.outcome("Merged", said, back, kit.viewer(caller), good=True)
        return Response(page, content_type="text/html; charset=utf-8")
