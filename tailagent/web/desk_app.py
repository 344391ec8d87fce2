"""The desk's app: its browser blueprint's rules, and the concerns that add routes to it.

Every change goes through the same request handler as A2A (`SendMessage`,
`CancelTask`), as the same caller the access layer established, so roles,
ownership, the answer rules and loop protection are A2A's, not a copy. The page
adds only what a browser needs: a form token per caller, action and task, and the
channel ("web") that the audit log records.

The pages' rules are here (a strict CSP and no caching on every response of the
app, Web Push's included; a refusal shown as a page); the routes are in modules
named for what they do, in web/routes/: the list and task pages (viewing.py), a
conversation's page (conversation.py), their live streams (streams.py), the forms that
drive tasks (actions.py), the merge and the whole diff (merging.py) and the local
sign-in (signin.py); Web Push's JSON routes keep rules of their own
(web/notifications/routes.py). Each is handed one `DeskKit` (web/route_kit.py).
"""

from __future__ import annotations

from quart import Blueprint, Quart, Response, request
from quart.typing import ResponseReturnValue

from tailagent.web.caller import current_caller
from tailagent.web.notifications.routes import push_blueprint
from tailagent.web.parts import DeskParts
from tailagent.web.route_kit import DeskKit, Refused
from tailagent.web.routes.actions import register_forms
from tailagent.web.routes.conversation import register_conversation
from tailagent.web.routes.merging import register_merge
from tailagent.web.routes.signin import register_signin
from tailagent.web.routes.streams import register_streams
from tailagent.web.routes.viewing import register_pages
from tailagent.web.views import render
from tailagent.web.views.task_lists import TaskLists

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


async def security_headers(response: Response) -> Response:
    """On every response of the desk's app, both blueprints: Web Push's notifications
    page is a page too, and its service worker runs under the CSP it was served with."""
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers.setdefault("Cache-Control", "no-store")
    return response


def blueprint(kit: DeskKit) -> Blueprint:
    """The desk's pages, streams and forms under `/desk`, with the browser's rules."""
    desk_bp = Blueprint("desk", __name__, url_prefix="/desk", static_folder="static")

    @desk_bp.errorhandler(Refused)
    async def refused(exc: Refused) -> ResponseReturnValue:
        back = request.path.rsplit("/", 1)[0] if request.method == "POST" else "/desk/"
        page = render.refusal(str(exc), back, kit.viewer(current_caller()))
        return Response(page, status=exc.status, content_type="text/html; charset=utf-8")

    concerns = (
        register_pages, register_conversation, register_streams, register_forms,
        register_merge, register_signin,
    )  # fmt: skip
    for register in concerns:
        register(desk_bp, kit)
    return desk_bp


def desk_app(parts: DeskParts) -> Quart:
    """The desk as a Quart app of its own (mounted lazily, see `LazyDesk`)."""
    kit = DeskKit(parts, TaskLists(parts.store, parts.desk, parts.conversations))
    app = Quart("tailagent")
    app.after_request(security_headers)
    app.register_blueprint(blueprint(kit))
    app.register_blueprint(push_blueprint(kit))
    return app
