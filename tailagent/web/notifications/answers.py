"""A notification's Allow or Deny, as the service worker sends it.

It carries a one-use token from the push instead of a page's form token, and goes
through the A2A handler as the desk's forms do, marked as sent "via notification" so
the audit log and the task say so. It changes with the push's action tokens and the
answer rules, not with subscriptions.
"""

from __future__ import annotations

from a2a.types.a2a_pb2 import Message, SendMessageConfiguration, SendMessageRequest, Task
from a2a.utils.errors import A2AError
from quart import Blueprint
from quart.typing import ResponseReturnValue

from tailagent.web.caller import call_context, current_caller
from tailagent.web.notifications.json_rules import PushRefused, json_body
from tailagent.web.route_kit import DeskKit, data_part, user_message
from tailagent.webpush.actions import ActionRefused


def register_answer(push_bp: Blueprint, kit: DeskKit) -> None:
    """Adds `/desk/push/answer`."""

    @push_bp.post("/push/answer")
    async def answer() -> ResponseReturnValue:
        """A notification's Allow or Deny, sent by the service worker with the one-use
        token the push carried; answered as the person the access layer names."""
        caller = current_caller()
        body = await json_body()
        choice = body.get("action")
        if choice not in ("allow", "deny"):
            raise PushRefused(400, "the action is allow or deny")
        try:
            bound = await kit.parts.webpush.tokens.redeem(str(body.get("token", "")), caller.owner)
        except ActionRefused as exc:
            raise PushRefused(403, str(exc)) from None
        context = call_context(caller, via="notification")
        task = await kit.parts.store.get(bound.task_id, context)
        if task is None:
            raise PushRefused(404, f"no task {bound.task_id} that you may see")
        message = _answer_message(task, bound.request_id, choice == "allow")
        send = SendMessageRequest(
            message=message, configuration=SendMessageConfiguration(return_immediately=True)
        )
        try:
            await kit.parts.handler.on_message_send(send, context)
        except A2AError as exc:
            raise PushRefused(409, exc.message or type(exc).__name__) from None
        return {"task": bound.task_id, "decision": choice}


def _answer_message(task: Task, request_id: str, allow: bool) -> Message:
    decision = {"kind": "permission_response", "decision": "allow" if allow else "deny",
                "requestId": request_id}  # fmt: skip
    message = user_message(data_part(decision), context_id=task.context_id, task_id=task.id)
    message.metadata.update({"requestId": request_id})
    return message
