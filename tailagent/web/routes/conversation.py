"""A conversation's page: every turn in order, as a chat reads, and the reply box.

Reached from a task (`/desk/tasks/<id>/conversation`), so whom it shows to is decided
as the task's page decides it: the task's owner, or an admin; anyone else gets the
"not found" a task they may not see gets, and learns nothing of the conversation. Its
turns are the tasks of the task's conversation, read as that owner (and, for an admin,
their own turns in it too). It replies through the same forms as a task's page,
which come back here.
"""

from __future__ import annotations

import dataclasses

from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import ListTasksRequest, Task
from quart import Blueprint
from quart.typing import ResponseReturnValue

from tailagent.access.identity import Caller
from tailagent.store.sdk_stores import OwnerUser
from tailagent.web.caller import current_caller
from tailagent.web.route_kit import DeskKit, Refused
from tailagent.web.standing import busy_with, standing, worktree_of
from tailagent.web.views import render
from tailagent.web.views.chat import in_order

MAX_TURNS = 200  # the latest ones; the rest are a task's link away
PAGE = 100


def register_conversation(desk_bp: Blueprint, kit: DeskKit) -> None:
    """Adds `/desk/tasks/<id>/conversation`."""

    @desk_bp.get("/tasks/<task_id>/conversation")
    async def conversation_page(task_id: str) -> ResponseReturnValue:
        caller = current_caller()
        task = await kit.visible_task(caller, task_id)  # another person's: not found
        loaded = await _tasks(kit, caller, task)
        turns = in_order(loaded)[-MAX_TURNS:]
        last = turns[-1].head
        worktree = await worktree_of(kit.parts, task.context_id)
        branch = None
        if worktree is not None and not worktree.idle:
            now = await standing(kit.parts, task.context_id, worktree.branch)
            branch = {"name": worktree.branch, "standing": now}
        viewer = dataclasses.replace(
            kit.viewer(caller),
            workspace=str(worktree.shown) if worktree is not None else kit.parts.workspace,
            busy=await busy_with(kit.parts, task.context_id, last["task_id"]),
            back="conversation",
        )
        follow = {"task_id": last["task_id"], "final": last["final"], "waiting": last["waiting"]}
        return render.page(
            "conversation.html", viewer, title=turns[0].head["title"], turns=turns,
            first=turns[0].head, last=last, branch=branch, follow=follow,
            ask=turns[-1].ask, refresh=not last["final"] and not last["waiting"],
        )  # fmt: skip


async def _tasks(kit: DeskKit, caller: Caller, task: Task) -> list[tuple[Task, str]]:
    """The conversation's tasks with their owners: its owner's, and an admin's own turns
    in it; read fresh (a task this process runs, from memory)."""
    store = kit.parts.store
    held = await store.with_owner(task.id)
    if held is None:
        raise Refused(404, f"no task {task.id} that you may see")
    scopes = {held[1]} | ({caller.owner} if caller.may("admin") else set())
    ids: set[str] = {task.id}
    for scope in scopes:
        token = ""
        while len(ids) < MAX_TURNS * 2:
            request = ListTasksRequest(
                context_id=task.context_id, page_size=PAGE, page_token=token, history_length=0
            )
            page = await store.list(request, ServerCallContext(user=OwnerUser(scope)))
            ids |= {listed.id for listed in page.tasks}
            token = page.next_page_token
            if not token:
                break
    ids |= {running for running, owner in store.held().items() if owner in scopes}
    found = []
    for some_id in ids:
        pair = await store.with_owner(some_id)
        if pair is not None and pair[0].context_id == task.context_id and pair[1] in scopes:
            found.append(pair)
    return found
