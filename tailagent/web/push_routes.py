"""The desk's routes for Web Push: the installable app's manifest and service worker,
a person's subscriptions, and the answer a notification's Allow or Deny brings.

These are JSON routes for the page's own script (static/notify.js) and its service
worker (static/sw.js). They sit behind the same access layer as the pages: the caller
is whoever whois (or the local sign-in) says, a POST must come from the page's own
origin, and a subscription is made only with a token the page was given for that
caller. A notification's answer goes through the A2A handler, as the desk's forms do,
marked as sent "via notification", so the audit log and the task say so.
"""

from __future__ import annotations

import json
import uuid
from importlib import resources
from typing import Any

from a2a.types.a2a_pb2 import (
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
)
from a2a.utils.errors import A2AError
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Value
from quart import Blueprint, Response, redirect, request
from quart.typing import ResponseReturnValue

from tailagent.access.identity import Caller
from tailagent.web import forms, render
from tailagent.web.caller import call_context, current_caller
from tailagent.web.parts import DeskParts
from tailagent.webpush.actions import ActionRefused
from tailagent.webpush.subscriptions import SubscriptionRefused

MAX_JSON = 8 * 1024  # a subscription is a few hundred bytes
THEME = "#1c1917"


class PushRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _device(caller: Caller) -> str:
    """Where a subscription was made, as people name the device."""
    return caller.node.split(".")[0] or "this box"


async def _json_body() -> dict[str, Any]:
    kind = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise PushRefused(415, "this takes application/json")
    raw = await request.get_data()
    if len(raw) > MAX_JSON:
        raise PushRefused(413, f"this takes {MAX_JSON} bytes at most")
    try:
        body = json.loads(raw)
    except ValueError:
        raise PushRefused(400, "the body is not JSON") from None
    if not isinstance(body, dict):
        raise PushRefused(400, "the body is a JSON object")
    return body


def _static(name: str) -> bytes:
    return resources.files("tailagent.web").joinpath("static", name).read_bytes()


def _answer_message(task: Task, request_id: str, allow: bool) -> Message:
    decision = {"kind": "permission_response", "decision": "allow" if allow else "deny",
                "requestId": request_id}  # fmt: skip
    message = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        task_id=task.id,
        context_id=task.context_id,
        parts=[Part(data=ParseDict(decision, Value()), media_type="application/json")],
    )
    message.metadata.update({"requestId": request_id})
    return message


def push_blueprint(parts: DeskParts) -> Blueprint:
    push_bp = Blueprint("desk_push", __name__, url_prefix="/desk")
    webpush = parts.webpush
    box = webpush.box

    @push_bp.errorhandler(PushRefused)
    async def refused(exc: PushRefused) -> ResponseReturnValue:
        return {"error": str(exc)}, exc.status

    @push_bp.get("/manifest.webmanifest")
    async def manifest() -> ResponseReturnValue:
        """What makes the desk an app a phone can put on its home screen (iOS delivers
        Web Push to such an app only)."""
        icons = [
            {"src": f"/desk/static/icon-{size}.png", "sizes": f"{size}x{size}",
             "type": "image/png", "purpose": "any maskable"}
            for size in (192, 512)
        ]  # fmt: skip
        body = {
            "name": f"tailagent on {box}",
            "short_name": box[:12] or "tailagent",
            "description": "Watch and approve what the coding agent on this box does.",
            "id": "/desk/",
            "start_url": "/desk/",
            "scope": "/desk/",
            "display": "standalone",
            "theme_color": THEME,
            "background_color": "#fafaf9",
            "icons": icons,
        }
        return Response(json.dumps(body), content_type="application/manifest+json")

    @push_bp.get("/sw.js")
    async def service_worker() -> ResponseReturnValue:
        """The service worker, from the desk's root so that it may control every page of
        it; always checked for a new version (no-cache), as a stale one would answer
        notifications with an old script."""
        response = Response(_static("sw.js"), content_type="text/javascript; charset=utf-8")
        response.headers["Cache-Control"] = "no-cache"
        response.headers["Service-Worker-Allowed"] = "/desk/"
        return response

    @push_bp.get("/push/key")
    async def key() -> ResponseReturnValue:
        """What the page needs to subscribe: the server's VAPID key, a token for this
        person, and the subscriptions they have (which follow their roles from here)."""
        caller = current_caller()
        await webpush.subscriptions.seen(caller.owner, tuple(sorted(caller.roles)))
        return {
            "publicKey": webpush.public_key,
            "token": forms.make(parts.secret, caller.owner, "push"),
            "device": _device(caller),
            "subscriptions": [s.public() for s in webpush.subscriptions.of(caller.owner)],
        }

    def check_token(caller: Caller, body: dict[str, Any]) -> None:
        if not forms.valid(parts.secret, str(body.get("token", "")), caller.owner, "push"):
            raise PushRefused(403, "this page's token is not valid for you: reload the page")

    @push_bp.post("/push/subscriptions")
    async def subscribe() -> ResponseReturnValue:
        caller = current_caller()
        body = await _json_body()
        check_token(caller, body)
        try:
            made = await webpush.subscriptions.add(
                caller.owner, _device(caller), tuple(sorted(caller.roles)), body.get("subscription")
            )
        except SubscriptionRefused as exc:
            raise PushRefused(400, str(exc)) from None
        return made.public(), 201

    @push_bp.post("/push/subscriptions/remove")
    async def unsubscribe() -> ResponseReturnValue:
        caller = current_caller()
        body = await _json_body()
        check_token(caller, body)
        subscription_id = str(body.get("id", ""))
        if not await webpush.subscriptions.remove(caller.owner, subscription_id):
            raise PushRefused(404, f"you have no subscription {subscription_id!r}")
        return {"removed": subscription_id}

    def viewer(caller: Caller) -> render.Viewer:
        def token(action: str, item: str) -> str:
            return forms.make(parts.secret, caller.owner, action, item)

        return render.Viewer(caller, token, parts.workspace)

    @push_bp.get("/notifications")
    async def notifications() -> ResponseReturnValue:
        """The devices a person is told on, each removable (a plain form: no script)."""
        caller = current_caller()
        mine = sorted(webpush.subscriptions.of(caller.owner), key=lambda s: s.created)
        page = render.page(
            "notifications.html", viewer(caller), subscriptions=[s.public() for s in mine]
        )
        return Response(page, content_type="text/html; charset=utf-8")

    @push_bp.post("/notifications/<subscription_id>/remove")
    async def remove(subscription_id: str) -> ResponseReturnValue:
        caller = current_caller()
        posted = await request.form
        token = posted.get("token", "")
        if not forms.valid(parts.secret, token, caller.owner, "push-remove", subscription_id):
            page = render.refusal("this form's token is not valid for you: reload the page",
                                  "/desk/notifications")  # fmt: skip
            return Response(page, status=403, content_type="text/html; charset=utf-8")
        await webpush.subscriptions.remove(caller.owner, subscription_id)
        return redirect("/desk/notifications", 303)

    @push_bp.post("/push/answer")
    async def answer() -> ResponseReturnValue:
        """A notification's Allow or Deny, sent by the service worker with the one-use
        token the push carried; answered as the person the access layer names."""
        caller = current_caller()
        body = await _json_body()
        choice = body.get("action")
        if choice not in ("allow", "deny"):
            raise PushRefused(400, "the action is allow or deny")
        try:
            bound = webpush.tokens.redeem(str(body.get("token", "")), caller.owner)
        except ActionRefused as exc:
            raise PushRefused(403, str(exc)) from None
        context = call_context(caller, via="notification")
        task = await parts.store.get(bound.task_id, context)
        if task is None:
            raise PushRefused(404, f"no task {bound.task_id} that you may see")
        message = _answer_message(task, bound.request_id, choice == "allow")
        send = SendMessageRequest(
            message=message, configuration=SendMessageConfiguration(return_immediately=True)
        )
        try:
            await parts.handler.on_message_send(send, context)
        except A2AError as exc:
            raise PushRefused(409, exc.message or type(exc).__name__) from None
        return {"task": bound.task_id, "decision": choice}

    return push_bp
