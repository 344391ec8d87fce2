"""The desk's local sign-in: the one-use link `tailagent web` asks for, and its redemption.

These are the only routes that deal in the sign-in cookie rather than a task; the link
is a JSON route for the local token alone, the redemption a browser's page. They
change with the desk's sign-in (web/sessions.py), not with the desk's pages.
"""

from __future__ import annotations

from quart import Blueprint, Response, redirect, request
from quart.typing import ResponseReturnValue

from tailagent.web.caller import current_caller
from tailagent.web.route_kit import DeskKit
from tailagent.web.sessions import SignInRefused, local_uid
from tailagent.web.views import render


def register_signin(desk_bp: Blueprint, kit: DeskKit) -> None:
    """Adds `/desk/signin-link` (JSON, for `tailagent web`) and `/desk/signin`."""

    @desk_bp.post("/signin-link")
    async def signin_link() -> ResponseReturnValue:
        """For `tailagent web`: a one-use sign-in link, for the local token only."""
        caller = current_caller()
        kind = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            return {"error": "this endpoint takes application/json"}, 415
        if caller.kind != "token" or caller.login != "local":
            return {"error": "only the local token (tailagent web, on this box) may ask"}, 403
        uid = local_uid(request.scope)
        if uid is None:  # the link would be bound to nobody: a link for anyone
            return {
                "error": "the server cannot tell which user of this box asks (it learns that "
                "for a loopback TCP connection only): ask on its 127.0.0.1 port"
            }, 403
        return {"path": f"/desk/signin?ticket={kit.parts.sessions.new_ticket(uid)}"}

    @desk_bp.get("/signin")
    async def signin() -> ResponseReturnValue:
        ticket = request.args.get("ticket", "")
        try:
            cookie = kit.parts.sessions.redeem(ticket, local_uid(request.scope))
        except SignInRefused as exc:
            page = render.refusal(str(exc), "/desk/", None)
            return Response(page, status=403, content_type="text/html; charset=utf-8")
        secure = request.headers.get("X-Forwarded-Proto") == "https"
        set_cookie = {"Set-Cookie": kit.parts.sessions.set_cookie(cookie, secure=secure)}
        if request.headers.get("Sec-Fetch-Site") in ("cross-site", "same-site"):
            # Opened from another site (the private page of `tailagent web --open` is a
            # file): a browser sends no SameSite=Strict cookie on where that navigation
            # is redirected, so the desk is opened from here, a page of its own site.
            page = render.outcome(
                "Signed in", "Opening the approval desk.", "/desk/", None, go_on=True, good=True
            )
            return Response(page, content_type="text/html; charset=utf-8", headers=set_cookie)
        response = redirect("/desk/", 303)
        response.headers.update(set_cookie)
        return response
