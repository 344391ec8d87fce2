"""The desk's live streams (server-sent events): the list's rows and a task's entries.

A stream outlives the request that opened it, wakes on the desk's journals, sends a
heartbeat while nothing changes and ends at once when the server stops; those rules
(and the browser's reconnect with `Last-Event-ID`) are what change here, not what a
page shows, so the streams stand apart from the pages that render the same rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from quart import Blueprint, Response, request
from quart.typing import ResponseReturnValue

from tailagent.access.identity import Caller
from tailagent.web.caller import current_caller
from tailagent.web.route_kit import DeskKit, older_arg
from tailagent.web.views import render
from tailagent.web.views.live import Journal
from tailagent.web.views.task_lists import list_context

HEARTBEAT = 15.0
RECONNECT_MS = 1000
LIST_SETTLE = 0.5  # state changes within it become one list update


def register_streams(desk_bp: Blueprint, kit: DeskKit) -> None:
    """Adds the list's stream (`/desk/events`) and a task's (`/desk/tasks/<id>/events`)."""

    @desk_bp.get("/events")
    async def list_events() -> ResponseReturnValue:
        caller = current_caller()
        return _stream(_list_body(kit, caller, older_arg()))

    @desk_bp.get("/tasks/<task_id>/events")
    async def task_events(task_id: str) -> ResponseReturnValue:
        caller = current_caller()
        await kit.visible_task(caller, task_id)
        last = request.headers.get("Last-Event-ID") or request.args.get("after", "")
        return _stream(_task_body(kit, caller, task_id, last))


async def _list_body(kit: DeskKit, caller: Caller, older: str) -> AsyncGenerator[bytes, None]:
    """The list's rows at once, then again after each change (settled), until the stop."""
    you = kit.viewer(caller)
    stopping = kit.parts.desk.stopping
    while not stopping.is_set():
        changed = kit.parts.desk.list_changed
        found, waiting = await kit.lists.rows(caller, older)
        html = render.page("rows.html", you, **list_context(found, waiting, older))
        yield _sse("rows", {"html": html, "waiting": waiting})
        while not await _wait_any((changed, stopping), HEARTBEAT):
            yield b": still here\n\n"
        await _wait_any((stopping,), LIST_SETTLE)


async def _task_body(
    kit: DeskKit, caller: Caller, task_id: str, last: str
) -> AsyncGenerator[bytes, None]:
    """A task's entries after `last`, and the caller's waiting tasks whenever they change;
    the task's journal stays pinned while anyone watches it."""
    desk = kit.parts.desk
    scope = None if caller.may("admin") else caller.owner
    seen, waiting_sent = last, None
    stopping = desk.stopping
    desk.pin(task_id)
    try:
        while not stopping.is_set():
            journal = await desk.journal(task_id)
            if journal is None:
                return
            woken, pulse = journal.woken, desk.waiting_changed
            if seen != journal.event_id:
                you = await kit.task_viewer(caller, _head_of(journal))
                yield _changes(journal, seen, you)
                seen = journal.event_id
            waiting = desk.waiting_for(scope)
            if waiting != waiting_sent:
                yield _sse("waiting", {"waiting": waiting})
                waiting_sent = waiting
            if not await _wait_any((woken, pulse, stopping), HEARTBEAT):
                yield b": still here\n\n"
    finally:
        desk.unpin(task_id)


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


def _head_of(journal: Journal) -> dict[str, Any]:
    head = journal.changes["head"].entry
    assert head is not None  # every task has a head, and it never goes
    return head.data


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
