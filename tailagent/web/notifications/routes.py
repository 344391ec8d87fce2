"""The desk's routes for Web Push: the installable app's manifest and service worker,
a person's subscriptions, and the answer a notification's Allow or Deny brings.

These are JSON routes for the page's own script (static/notify.js) and its service
worker (static/sw.js), on a blueprint of their own because their rules differ from
the pages' (json_rules.py: a bounded JSON body, refusals as JSON). They sit behind the
same access layer as the pages: the caller is whoever whois (or the local sign-in)
says, a POST must come from the page's own origin, and a subscription is made only
with a token the page was given for that caller.
"""

from __future__ import annotations

from quart import Blueprint
from quart.typing import ResponseReturnValue

from tailagent.web.notifications.answers import register_answer
from tailagent.web.notifications.installable import register_app
from tailagent.web.notifications.json_rules import PushRefused
from tailagent.web.notifications.subscriptions import register_subscriptions
from tailagent.web.route_kit import DeskKit


def push_blueprint(kit: DeskKit) -> Blueprint:
    """Web Push's routes under `/desk`, refusing in JSON."""
    push_bp = Blueprint("desk_push", __name__, url_prefix="/desk")

    @push_bp.errorhandler(PushRefused)
    async def refused(exc: PushRefused) -> ResponseReturnValue:
        return {"error": str(exc)}, exc.status

    for register in (register_app, register_subscriptions, register_answer):
        register(push_bp, kit)
    return push_bp
