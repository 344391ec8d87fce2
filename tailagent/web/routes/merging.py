"""The desk's merge: a task's conversation squashed into its base branch.

It acts on the conversation's worktree, not on a task, and its outcome is a page of
its own: what was merged, or a conflict with the request to send the agent (worded by
the worktrees' refusal, which is why the two change together and apart from the forms).
"""

from __future__ import annotations

import re

from a2a.types.a2a_pb2 import Message, SendMessageRequest
from a2a.utils.errors import A2AError
from quart import Blueprint, Response, request
from quart.typing import ResponseReturnValue

from tailagent.web import forms
from tailagent.web.caller import current_caller
from tailagent.web.route_kit import DeskKit, Refused, data_part, status_of, user_message
from tailagent.web.views import diffs, render
from tailagent.web.views.transcript import first_prompt

# How a merge conflict's refusal words the request to send the agent
# (workspace/conversation_repos/plumbing/errors.py).
SUGGESTED = re.compile(r'ask the agent: "(.+)"\s*$', re.DOTALL)


# A commit's full id, as the confirmation names the tip it showed.
TIP = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def register_merge(desk_bp: Blueprint, kit: DeskKit) -> None:
    """Adds `/desk/tasks/<id>/merge`, and `/desk/tasks/<id>/diff` (the conversation's
    whole diff, which the merge's confirmation shows bounded)."""

    @desk_bp.get("/tasks/<task_id>/diff")
    async def whole_diff(task_id: str) -> ResponseReturnValue:
        """The task's conversation as one patch (A2A's diff message): a page of coloured
        files for a browser, plain text for `curl` (what its Accept prefers, or
        `?plain`), so a patch can still be piped to `git apply`."""
        caller = current_caller()
        task = await kit.visible_task(caller, task_id)
        ask = user_message(data_part({"kind": "diff"}), context_id=task.context_id)
        try:
            reply = await kit.ask(caller, SendMessageRequest(message=ask))
        except A2AError as exc:
            raise Refused(status_of(exc), exc.message or type(exc).__name__) from None
        said = "".join(p.text for p in reply.parts) if isinstance(reply, Message) else ""
        if "plain" in request.args or not _wants_html():
            response = Response(said, content_type="text/plain; charset=utf-8")
            response.headers["Content-Disposition"] = "inline"
            response.headers["Vary"] = "Accept"
            return response
        page = render.page(
            "diff.html", kit.viewer(caller), task_id=task.id, title=first_prompt(task),
            sections=diffs.sections(said),
        )  # fmt: skip
        response = Response(page, content_type="text/html; charset=utf-8")
        response.headers["Vary"] = "Accept"
        return response

    @desk_bp.post("/tasks/<task_id>/merge")
    async def merge(task_id: str) -> ResponseReturnValue:
        """Squashes the task's conversation into its base branch (A2A's merge message),
        only from the tip its confirmation showed: a branch that moved since is refused."""
        caller = current_caller()
        posted = await kit.form(caller, "merge", task_id)
        task = await kit.visible_task(caller, task_id)
        tip = (posted.get("tip") or [""])[0]
        if not TIP.fullmatch(tip):
            raise Refused(400, "this merge names no change it was shown: reload the page")
        merge_part = data_part({"kind": "merge", "strategy": "squash", "expect": tip})
        request_ = user_message(merge_part, context_id=task.context_id)
        back = f"/desk/tasks/{task_id}"
        try:
            reply = await kit.ask(caller, SendMessageRequest(message=request_))
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


def _wants_html() -> bool:
    """Whether the request's Accept prefers a page to plain text (a browser's does;
    curl's `*/*` and a missing Accept get the patch)."""
    best = request.accept_mimetypes.best_match(["text/plain", "text/html"])
    return best == "text/html"
