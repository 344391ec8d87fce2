"""The desk's routes: pages, their live streams, and the forms that change things.

Every change goes through the same request handler as A2A (`SendMessage`,
`CancelTask`), as the same caller the access layer established, so roles,
ownership, the answer rules and loop protection are A2A's, not a copy. The page
adds only what a browser needs: a form token per caller, action and task, and the
channel ("web") that the audit log records.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    Task,
)
from a2a.utils.errors import A2AError, InvalidRequestError, TaskNotFoundError
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Value
from quart import Blueprint, Quart, Response, redirect, request
from quart.typing import ResponseReturnValue

from tailagent.access.browser import SignInRefused, local_uid
from tailagent.access.identity import Caller
from tailagent.bridge.conversations import Isolated
from tailagent.bridge.store import position
from tailagent.bridge.task_table import Position
from tailagent.web import forms, render
from tailagent.web.caller import call_context, current_caller
from tailagent.web.live import Journal
from tailagent.web.parts import DeskParts
from tailagent.web.transcript import SECTIONS, Entry, Row, entries, row
from tailagent.workspace import GitError, Worktree

LIST_LIMIT = 50
LIST_CACHE = 64  # people whose list is kept between changes
HEARTBEAT = 15.0
RECONNECT_MS = 1000
LIST_SETTLE = 0.5  # state changes within it become one list update
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
FORM_TYPE = "application/x-www-form-urlencoded"
# How a merge conflict's refusal words the request to send the agent (worktrees.py).
SUGGESTED = re.compile(r'ask the agent: "(.+)"\s*$', re.DOTALL)
# Where a page of older tasks starts: `<microseconds>-<task id>` (see store.position).
OLDER = re.compile(r"(\d{1,20})-([\w.:-]{1,200})")


class Refused(Exception):
    """A form the server will not act on; str() is what the person reads."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ListPage:
    """One page of the list: its rows, and where the next (older) page starts."""

    rows: list[Row]
    older: str  # the next page's `older=` value; "" on the last page


def _sse(event: str, data: dict[str, Any], event_id: str | None = None) -> bytes:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def _with_retry(body: AsyncGenerator[bytes, None]) -> AsyncIterator[bytes]:
    """A stream that first tells the browser to come back within a second if cut;
    closing it closes the view's own generator at once (its watcher count, its pin)."""
    async with contextlib.aclosing(body):
        yield f"retry: {RECONNECT_MS}\n\n".encode()
        async for chunk in body:
            yield chunk


def _stream(body: AsyncGenerator[bytes, None]) -> Response:
    response = Response(_with_retry(body), content_type="text/event-stream")
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Accel-Buffering"] = "no"
    response.timeout = None  # a live view outlives Quart's 60 s response limit
    return response


def blueprint(parts: DeskParts) -> Blueprint:
    desk_bp = Blueprint("desk", __name__, url_prefix="/desk", static_folder="static")

    def viewer(caller: Caller) -> render.Viewer:
        def token(action: str, task_id: str) -> str:
            return forms.make(parts.secret, caller.owner, action, task_id)

        return render.Viewer(caller, token, parts.workspace)

    async def task_viewer(caller: Caller, head: dict[str, Any]) -> render.Viewer:
        """The viewer of one task's page: with the directory its commands run in (the
        conversation's worktree, where it has one) and what became of its branch."""
        you = viewer(caller)
        worktree = await _worktree(parts, head["context_id"])
        workdir = str(worktree.path) if worktree is not None else parts.workspace
        branch = head["worktree"].get("branch") if isinstance(head["worktree"], dict) else None
        note = ""
        if branch and (worktree is None or worktree.branch != branch):
            note = parts.desk.merged.get(head["context_id"], "merged or discarded (it is gone)")
        return render.Viewer(caller, you.token, workdir, note)

    async def visible_task(caller: Caller, task_id: str) -> Task:
        task = await parts.store.get(task_id, call_context(caller))
        if task is None:
            raise Refused(404, f"no task {task_id} that you may see")
        return task

    # (scope, page) -> (list version, its read): every open list of one person (or of
    # the admins) shares one store read per change, even the ones woken together.
    reads: dict[tuple[str | None, str], tuple[int, asyncio.Task[ListPage]]] = {}

    async def read_rows(scope: str | None, older: str) -> ListPage:
        """A page of the list. The first starts with every task that waits for an answer,
        however old: a question must never hide on a later page."""
        recent = await parts.store.recent(scope, LIST_LIMIT, _position(older))
        more = _older_of(position(recent[-1][0])) if len(recent) == LIST_LIMIT else ""
        found = {task.id: (task, owner) for task, owner in recent}
        if not older:
            for task_id in parts.desk.waiting_for(scope):
                if task_id not in found and (held := await parts.store.with_owner(task_id)):
                    found[task_id] = held
        listed = [row(task, owner) for task, owner in found.values()]
        # Waiting first; sorted is stable, so newest first within each.
        return ListPage(sorted(listed, key=lambda r: not r.waiting) if not older else listed, more)

    async def rows(caller: Caller, older: str = "") -> tuple[ListPage, list[str]]:
        scope = None if caller.may("admin") else caller.owner
        version = parts.desk.list_version
        cached = reads.get((scope, older))
        if cached is None or cached[0] != version or cached[1].cancelled():
            read = asyncio.ensure_future(read_rows(scope, older))
            cached = reads[(scope, older)] = (version, read)
            if len(reads) > LIST_CACHE:
                reads.pop(next(iter(reads)))
        return await asyncio.shield(cached[1]), parts.desk.waiting_for(scope)

    async def form(caller: Caller, action: str, task_id: str = "") -> dict[str, Any]:
        """The posted form, once its token proves this page made it for this caller."""
        kind = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind != FORM_TYPE:
            raise Refused(415, f"this form takes {FORM_TYPE}, not {kind or 'no body type'}")
        posted = await request.form
        if not forms.valid(parts.secret, posted.get("token", ""), caller.owner, action, task_id):
            raise Refused(
                403, "this form's token is not valid for you, this task and this action: "
                "reload the page and try again"
            )  # fmt: skip
        return {key: posted.getlist(key) for key in posted}

    async def send(caller: Caller, message: Message) -> Task:
        request_ = SendMessageRequest(
            message=message, configuration=SendMessageConfiguration(return_immediately=True)
        )
        try:
            result = await parts.handler.on_message_send(request_, call_context(caller))
        except A2AError as exc:
            raise Refused(_status_of(exc), exc.message or type(exc).__name__) from None
        if not isinstance(result, Task):
            raise Refused(500, "the agent answered with a message, not a task")
        return result

    @desk_bp.after_request
    async def security_headers(response: Response) -> Response:
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    @desk_bp.errorhandler(Refused)
    async def refused(exc: Refused) -> ResponseReturnValue:
        back = request.path.rsplit("/", 1)[0] if request.method == "POST" else "/desk/"
        page = render.refusal(str(exc), back, viewer(current_caller()))
        return Response(page, status=exc.status, content_type="text/html; charset=utf-8")

    def list_context(page: ListPage, waiting: list[str], older: str) -> dict[str, Any]:
        return {"rows": page.rows, "more": page.older, "older": older, "waiting": waiting}

    @desk_bp.get("/")
    async def task_list() -> ResponseReturnValue:
        caller = current_caller()
        older = _older_arg()
        found, waiting = await rows(caller, older)
        return render.page("list.html", viewer(caller), **list_context(found, waiting, older))

    @desk_bp.get("/events")
    async def list_events() -> ResponseReturnValue:
        caller = current_caller()
        you = viewer(caller)
        older = _older_arg()

        async def body() -> AsyncGenerator[bytes, None]:
            stopping = parts.desk.stopping
            while not stopping.is_set():
                changed = parts.desk.list_changed
                found, waiting = await rows(caller, older)
                html = render.page("rows.html", you, **list_context(found, waiting, older))
                yield _sse("rows", {"html": html, "waiting": waiting})
                while not await _wait_any((changed, stopping), HEARTBEAT):
                    yield b": still here\n\n"
                await _wait_any((stopping,), LIST_SETTLE)

        return _stream(body())

    @desk_bp.get("/tasks/<task_id>")
    async def task_page(task_id: str) -> ResponseReturnValue:
        caller = current_caller()
        task = await visible_task(caller, task_id)
        journal = await parts.desk.journal(task_id)
        if journal is None:
            raise Refused(404, f"no task {task_id}")
        current = [c.entry for c in journal.changes.values() if c.entry is not None]
        by_section: dict[str, list[Entry]] = {s: [] for s in SECTIONS}
        for item in current:
            by_section[item.section].append(item)
        head = by_section["head"][0].data
        return render.page(
            "task.html",
            await task_viewer(caller, head),
            task_id=task.id,
            title=head["title"],
            sections=SECTIONS,
            by_section=by_section,
            event_id=journal.event_id,
        )

    @desk_bp.get("/tasks/<task_id>/events")
    async def task_events(task_id: str) -> ResponseReturnValue:
        caller = current_caller()
        await visible_task(caller, task_id)
        scope = None if caller.may("admin") else caller.owner
        last = request.headers.get("Last-Event-ID") or request.args.get("after", "")

        async def body() -> AsyncGenerator[bytes, None]:
            seen, waiting_sent = last, None
            stopping = parts.desk.stopping
            parts.desk.pin(task_id)
            try:
                while not stopping.is_set():
                    journal = await parts.desk.journal(task_id)
                    if journal is None:
                        return
                    woken, pulse = journal.woken, parts.desk.waiting_changed
                    if seen != journal.event_id:
                        you = await task_viewer(caller, _head_of(journal))
                        yield _changes(journal, seen, you)
                        seen = journal.event_id
                    waiting = parts.desk.waiting_for(scope)
                    if waiting != waiting_sent:
                        yield _sse("waiting", {"waiting": waiting})
                        waiting_sent = waiting
                    if not await _wait_any((woken, pulse, stopping), HEARTBEAT):
                        yield b": still here\n\n"
            finally:
                parts.desk.unpin(task_id)

        return _stream(body())

    @desk_bp.post("/tasks")
    async def new_task() -> ResponseReturnValue:
        caller = current_caller()
        text = _text_of(await form(caller, "send"), "say what the agent should do")
        task = await send(caller, _message(text))
        return redirect(f"/desk/tasks/{task.id}", 303)

    @desk_bp.post("/tasks/<task_id>/follow")
    async def follow_up(task_id: str) -> ResponseReturnValue:
        caller = current_caller()
        text = _text_of(await form(caller, "follow", task_id), "say what comes next")
        task = await visible_task(caller, task_id)
        follow = await send(caller, _message(text, context_id=task.context_id))
        return redirect(f"/desk/tasks/{follow.id}", 303)

    @desk_bp.post("/tasks/<task_id>/answer")
    async def answer(task_id: str) -> ResponseReturnValue:
        caller = current_caller()
        posted = await form(caller, "answer", task_id)
        task = await visible_task(caller, task_id)
        message = _answer(posted)
        message.task_id, message.context_id = task.id, task.context_id
        try:
            await send(caller, message)
        except Refused:
            request_id = (posted.get("requestId") or [""])[0]
            decided = await decision_of(caller, task_id, request_id)
            if decided is None:
                raise
            page = render.outcome(
                "Already answered", "This request was answered already:",
                f"/desk/tasks/{task_id}", viewer(caller), decision=decided,
            )  # fmt: skip
            return Response(page, status=409, content_type="text/html; charset=utf-8")
        if (posted.get("back") or [""])[0] == "list":
            return redirect("/desk/", 303)
        return redirect(f"/desk/tasks/{task_id}", 303)

    async def decision_of(caller: Caller, task_id: str, request_id: str) -> Entry | None:
        """The decision already taken on a request of the task, as its entry (the stale
        answer's page shows who came first in the task's own words)."""
        loaded = await parts.store.with_owner(task_id)
        if not request_id or loaded is None:
            return None
        return next((e for e in entries(*loaded) if e.kind == "resumed"
                     and e.data.get("request_id") == request_id), None)  # fmt: skip

    @desk_bp.post("/tasks/<task_id>/merge")
    async def merge(task_id: str) -> ResponseReturnValue:
        """Squashes the task's conversation into its base branch (A2A's merge message)."""
        caller = current_caller()
        await form(caller, "merge", task_id)
        task = await visible_task(caller, task_id)
        request_ = _message("", context_id=task.context_id)
        del request_.parts[:]
        request_.parts.append(_data_part({"kind": "merge", "strategy": "squash"}))
        back = f"/desk/tasks/{task_id}"
        try:
            reply = await parts.handler.on_message_send(
                SendMessageRequest(message=request_), call_context(caller)
            )
        except A2AError as exc:
            said = exc.message or type(exc).__name__
            suggested = SUGGESTED.search(said)
            if suggested is None:
                raise Refused(_status_of(exc), said) from None
            token = forms.make(parts.secret, caller.owner, "follow", task_id)
            follow = {"action": f"{back}/follow", "text": suggested.group(1), "token": token}
            page = render.outcome("Merge conflict", said, back, viewer(caller), follow_up=follow)
            return Response(page, status=409, content_type="text/html; charset=utf-8")
        said = "".join(p.text for p in reply.parts) if isinstance(reply, Message) else ""
        parts.desk.merged[task.context_id] = said
        page = render.outcome("Merged", said, back, viewer(caller), good=True)
        return Response(page, content_type="text/html; charset=utf-8")

    @desk_bp.post("/tasks/<task_id>/cancel")
    async def cancel(task_id: str) -> ResponseReturnValue:
        caller = current_caller()
        await form(caller, "cancel", task_id)
        try:
            await parts.handler.on_cancel_task(CancelTaskRequest(id=task_id), call_context(caller))
        except A2AError as exc:
            raise Refused(409, exc.message or type(exc).__name__) from None
        return redirect(f"/desk/tasks/{task_id}", 303)

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
        return {"path": f"/desk/signin?ticket={parts.sessions.new_ticket(uid)}"}

    @desk_bp.get("/signin")
    async def signin() -> ResponseReturnValue:
        ticket = request.args.get("ticket", "")
        try:
            cookie = parts.sessions.redeem(ticket, local_uid(request.scope))
        except SignInRefused as exc:
            page = render.refusal(str(exc), "/desk/", None)
            return Response(page, status=403, content_type="text/html; charset=utf-8")
        secure = request.headers.get("X-Forwarded-Proto") == "https"
        set_cookie = {"Set-Cookie": parts.sessions.set_cookie(cookie, secure=secure)}
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

    return desk_bp


def _older_arg() -> str:
    """The list page asked for (`?older=`), or "" for the first; anything else is refused."""
    older = request.args.get("older", "")
    if older and not OLDER.fullmatch(older):
        raise Refused(400, "this link to older tasks is not one the page made")
    return older


def _older_of(where: Position) -> str:
    return f"{where[0]}-{where[1]}"


def _position(older: str) -> Position | None:
    match = OLDER.fullmatch(older)
    return (int(match.group(1)), match.group(2)) if match else None


def _head_of(journal: Journal) -> dict[str, Any]:
    head = journal.changes["head"].entry
    assert head is not None  # every task has a head, and it never goes
    return head.data


async def _worktree(parts: DeskParts, context_id: str) -> Worktree | None:
    """The conversation's worktree record (its path, its branch), None without one.
    A record it cannot read shows as none (the page is no place to repair it)."""
    conversations = parts.conversations
    if not isinstance(conversations, Isolated):
        return None
    try:
        return await conversations.worktrees.get(context_id)
    except GitError:
        return None


def _text_of(posted: dict[str, list[str]], hint: str) -> str:
    text = (posted.get("text") or [""])[0].strip()
    if not text:
        raise Refused(400, f"the message is empty: {hint}")
    return text


def _status_of(error: A2AError) -> int:
    """The page's status for a refusal of the handler: another person's conversation is
    not found, a missing role forbidden, anything else a conflict with its state."""
    if isinstance(error, TaskNotFoundError):
        return 404
    return 403 if isinstance(error, InvalidRequestError) else 409


def _message(text: str, context_id: str = "") -> Message:
    return Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        context_id=context_id,
        parts=[Part(text=text)],
    )


def _answer(posted: dict[str, list[str]]) -> Message:
    """The A2A answer a decision form stands for (DESIGN.md, "Answers")."""
    choice = (posted.get("choice") or [""])[0]
    request_id = (posted.get("requestId") or [""])[0]
    note = (posted.get("message") or [""])[0].strip()
    message = _message("")
    del message.parts[:]
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
    elif choice == "text" and note:
        message.parts.append(Part(text=note))
    else:
        raise Refused(400, "this form has no answer in it")
    if data is not None:
        message.parts.append(_data_part(data))
    return message


def _data_part(data: dict[str, Any]) -> Part:
    return Part(data=ParseDict(data, Value()), media_type="application/json")


def _changes(journal: Journal, last: str, viewer: render.Viewer) -> bytes:
    reset, changes = journal.since(last)
    items = [
        {"key": c.key, "section": c.section, "html": render.entry(c.entry, viewer)}
        if c.entry is not None
        else {"key": c.key, "section": c.section, "gone": True}
        for c in changes
    ]
    return _sse("entries", {"reset": reset, "items": items}, journal.event_id)


async def _wait_any(events: tuple[asyncio.Event, ...], seconds: float) -> bool:
    """Waits for any of the events (a stream's own, and the desk's `stopping`, so a
    stop never waits for a heartbeat); False when the timeout came first."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        done, _ = await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
        return bool(done)
    finally:
        for waiting in waits:
            waiting.cancel()


def desk_app(parts: DeskParts) -> Quart:
    """The desk as a Quart app of its own (mounted lazily, see `LazyDesk`)."""
    app = Quart("tailagent")
    app.register_blueprint(blueprint(parts))
    return app
