"""What every route of the desk's pages is given: one small value, `DeskKit`.

The pages, the live streams and the forms change for different reasons, so each lives
in a module of its own; what they share is here, passed in explicitly rather than
closed over: the running server's parts, the list reads they share, who sees a page
(with the form tokens made for them), the task a caller may see, the posted form
proven by its token, the send through the A2A handler, and the refusal (`Refused`)
that becomes the page a person reads.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass
from typing import Any

from a2a.types.a2a_pb2 import (
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
)
from a2a.utils.errors import (
    JSON_RPC_ERROR_CODE_MAP,
    A2AError,
    InvalidRequestError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value
from quart import request

from tailagent.access.identity import Caller
from tailagent.web import forms
from tailagent.web.caller import call_context, carried_home
from tailagent.web.parts import DeskParts
from tailagent.web.standing import busy_with, fate_of, standing, worktree_of
from tailagent.web.views import render
from tailagent.web.views.task_lists import OLDER, TaskLists

FORM_TYPE = "application/x-www-form-urlencoded"
# A JSON-RPC error code -> a2a-sdk's error, to raise the home box's refusal here as it was.
ERRORS = {code: kind for kind, code in JSON_RPC_ERROR_CODE_MAP.items()}


class Refused(Exception):
    """A form the server will not act on; str() is what the person reads."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class DeskKit:
    """The server's parts and the list reads, with the steps every route takes."""

    parts: DeskParts
    lists: TaskLists

    def viewer(self, caller: Caller) -> render.Viewer:
        """Who a page is rendered for, with the form tokens made for them alone."""
        secret = self.parts.secret

        def token(action: str, task_id: str) -> str:
            return forms.make(secret, caller.owner, action, task_id)

        return render.Viewer(caller, token, self.parts.workspace, fence=self.parts.fence,
                             boxes=self.parts.store.shared)  # fmt: skip

    async def task_viewer(self, caller: Caller, head: dict[str, Any]) -> render.Viewer:
        """The viewer of one task's page: with the directory its commands run in (the
        conversation's worktree, where it has one), whether the conversation is busy with
        another task, and, once a turn that changed something is over, what became of
        its branch, where it stands now and what a merge of it would bring (for an
        approver). A turn that changed nothing says nothing of merging."""
        context_id = head["context_id"]
        worktree = await worktree_of(self.parts, context_id)
        viewer = dataclasses.replace(
            self.viewer(caller),
            workspace=str(worktree.shown) if worktree is not None else self.parts.workspace,
            busy=await busy_with(self.parts, context_id, head["task_id"]),
        )
        if not (head["final"] and head.get("changed")):
            return viewer
        tree = head["worktree"]
        # A conversation another box runs has its worktree there: what became of it, and
        # what a merge would bring, are that box's to say (the preview is carried there).
        here = await self.parts.store.contexts.home_elsewhere(context_id) is None
        fate = await fate_of(self.parts, context_id, tree) if here else ""
        if fate:
            return dataclasses.replace(viewer, branch_note=fate)
        now = (
            await standing(self.parts, context_id, str(tree.get("branch") or "")) if here else None
        )
        preview, note = None, ""
        if caller.may("approver"):
            preview, note = await self._merge_preview(caller, context_id)
        return dataclasses.replace(viewer, standing=now, merge=preview, branch_note=note)

    async def _merge_preview(
        self, caller: Caller, context_id: str
    ) -> tuple[dict[str, Any] | None, str]:
        """What merging the conversation would bring, read from git through the handler
        (a merge's dry run, so the caller's right to it is checked as a merge's is); or
        why there is nothing to merge (then the page offers no merge)."""
        ask = user_message(data_part({"kind": "merge", "dryRun": True}), context_id=context_id)
        try:
            reply = await self.ask(caller, SendMessageRequest(message=ask))
        except A2AError as exc:
            return None, exc.message or type(exc).__name__
        for part in reply.parts if isinstance(reply, Message) else []:
            data = MessageToDict(part.data) if part.HasField("data") else {}
            if isinstance(data, dict) and data.get("dryRun"):
                return data, ""
        return None, "nothing to merge"

    async def visible_task(self, caller: Caller, task_id: str) -> Task:
        task = await self.parts.store.get(task_id, call_context(caller))
        if task is None:
            raise Refused(404, f"no task {task_id} that you may see")
        return task

    async def form(self, caller: Caller, action: str, task_id: str = "") -> dict[str, Any]:
        """The posted form, once its token proves this page made it for this caller."""
        kind = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind != FORM_TYPE:
            raise Refused(415, f"this form takes {FORM_TYPE}, not {kind or 'no body type'}")
        posted = await request.form
        token = posted.get("token", "")
        if not forms.valid(self.parts.secret, token, caller.owner, action, task_id):
            raise Refused(
                403, "this form's token is not valid for you, this task and this action: "
                "reload the page and try again"
            )  # fmt: skip
        return {key: posted.getlist(key) for key in posted}

    async def ask(self, caller: Caller, request_: SendMessageRequest) -> Message | Task:
        """The A2A handler's answer to `request_` sent as `caller`; from the box that
        runs the work when that is another (cluster/carry.py): an answer to a question
        asked there, a diff or merge of a conversation that lives there. A2AError as the
        handler raises it, or as the home box answered it."""
        context = call_context(caller, carry=self.parts.carrier is not None)
        try:
            return await self.parts.handler.on_message_send(request_, context)
        except A2AError as exc:
            home = carried_home(context)
            if not home or self.parts.carrier is None:
                raise
            refusal = exc
        answer = await self.parts.carrier.call(home, caller, "SendMessage",
                                               MessageToDict(request_))  # fmt: skip
        if answer is None:  # the home box cannot be reached: this box's refusal names it
            raise refusal
        if "error" in answer:
            error = answer["error"]
            raise ERRORS.get(error.get("code"), UnsupportedOperationError)(
                message=str(error.get("message", error))
            )
        result = answer.get("result", {})
        if "message" in result:
            return ParseDict(result["message"], Message(), ignore_unknown_fields=True)
        return ParseDict(result.get("task", {}), Task(), ignore_unknown_fields=True)

    async def send(self, caller: Caller, message: Message) -> Task:
        """The message sent as `caller`, its turn started (see `ask`)."""
        request_ = SendMessageRequest(
            message=message, configuration=SendMessageConfiguration(return_immediately=True)
        )
        try:
            result = await self.ask(caller, request_)
        except A2AError as exc:
            raise Refused(status_of(exc), exc.message or type(exc).__name__) from None
        if not isinstance(result, Task):
            raise Refused(500, "the agent answered with a message, not a task")
        return result


def older_arg() -> str:
    """The list page asked for (`?older=`), or "" for the first; anything else is refused."""
    older = request.args.get("older", "")
    if older and not OLDER.fullmatch(older):
        raise Refused(400, "this link to older tasks is not one the page made")
    return older


def status_of(error: A2AError) -> int:
    """The page's status for a refusal of the handler: another person's conversation is
    not found, a missing role forbidden, anything else a conflict with its state."""
    if isinstance(error, TaskNotFoundError):
        return 404
    return 403 if isinstance(error, InvalidRequestError) else 409


def user_message(*parts: Part | str, context_id: str = "", task_id: str = "") -> Message:
    """A person's message, as the desk sends it through the A2A handler; a str part is
    text."""
    return Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        context_id=context_id,
        task_id=task_id,
        parts=[Part(text=part) if isinstance(part, str) else part for part in parts],
    )


def data_part(data: dict[str, Any]) -> Part:
    return Part(data=ParseDict(data, Value()), media_type="application/json")
