"""A person's Web Push subscriptions: the page's script subscribing and unsubscribing,
and the plain page listing the devices they are told on, each removable.

A subscription is made only with a token the page was given for that caller, and it
keeps the device's tailnet address, which the access policy is asked about before each
message (web/notifications/policy.py); that, not the notifications themselves or the app's
manifest, is what changes in this module.
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response, redirect, request
from quart.typing import ResponseReturnValue

from tailagent.access.identity import Caller
from tailagent.web import forms
from tailagent.web.caller import current_caller
from tailagent.web.notifications.json_rules import PushRefused, json_body
from tailagent.web.route_kit import DeskKit
from tailagent.web.views import render
from tailagent.webpush.subscriptions import SubscriptionRefused


def register_subscriptions(push_bp: Blueprint, kit: DeskKit) -> None:
    """Adds `/desk/push/key`, `/desk/push/subscriptions[/remove]` (JSON, for notify.js)
    and `/desk/notifications[/<id>/remove]` (a page and its forms, no script)."""
    secret, subscriptions = kit.parts.secret, kit.parts.webpush.subscriptions

    @push_bp.get("/push/key")
    async def key() -> ResponseReturnValue:
        """What the page needs to subscribe: the server's VAPID key, a token for this
        person, and the subscriptions they have."""
        caller = current_caller()
        return {
            "publicKey": kit.parts.webpush.public_key,
            "token": forms.make(secret, caller.owner, "push"),
            "device": _device(caller),
            "subscriptions": [s.public() for s in subscriptions.of(caller.owner)],
        }

    @push_bp.post("/push/subscriptions")
    async def subscribe() -> ResponseReturnValue:
        caller = current_caller()
        body = await json_body()
        _check_token(secret, caller, body)
        try:
            made = await subscriptions.add(
                caller.owner, _device(caller), caller.address, body.get("subscription")
            )
        except SubscriptionRefused as exc:
            raise PushRefused(400, str(exc)) from None
        return made.public(), 201

    @push_bp.post("/push/subscriptions/remove")
    async def unsubscribe() -> ResponseReturnValue:
        caller = current_caller()
        body = await json_body()
        _check_token(secret, caller, body)
        subscription_id = str(body.get("id", ""))
        if not await subscriptions.remove(caller.owner, subscription_id):
            raise PushRefused(404, f"you have no subscription {subscription_id!r}")
        return {"removed": subscription_id}

    @push_bp.get("/notifications")
    async def notifications() -> ResponseReturnValue:
        """The devices a person is told on, each removable (a plain form: no script)."""
        caller = current_caller()
        mine = sorted(subscriptions.of(caller.owner), key=lambda s: s.created)
        page = render.page(
            "notifications.html", kit.viewer(caller), subscriptions=[s.public() for s in mine]
        )
        return Response(page, content_type="text/html; charset=utf-8")

    @push_bp.post("/notifications/<subscription_id>/remove")
    async def remove(subscription_id: str) -> ResponseReturnValue:
        caller = current_caller()
        posted = await request.form
        token = posted.get("token", "")
        if not forms.valid(secret, token, caller.owner, "push-remove", subscription_id):
            page = render.refusal("this form's token is not valid for you: reload the page",
                                  "/desk/notifications")  # fmt: skip
            return Response(page, status=403, content_type="text/html; charset=utf-8")
        await subscriptions.remove(caller.owner, subscription_id)
        return redirect("/desk/notifications", 303)


def _device(caller: Caller) -> str:
    """Where a subscription was made, as people name the device."""
    return caller.node.split(".")[0] or "this box"


def _check_token(secret: bytes, caller: Caller, body: dict[str, Any]) -> None:
    if not forms.valid(secret, str(body.get("token", "")), caller.owner, "push"):
        raise PushRefused(403, "this page's token is not valid for you: reload the page")
