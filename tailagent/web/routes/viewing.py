"""The desk's two pages that only read: the list of tasks and one task's page.

They change with what a person sees (the templates' context, the sections of a task),
not with how the page stays live (streams.py) or what its forms do (actions.py), so
they stand apart from both.
"""

from __future__ import annotations

from quart import Blueprint
from quart.typing import ResponseReturnValue

from tailagent.web.caller import current_caller
from tailagent.web.route_kit import DeskKit, Refused, older_arg
from tailagent.web.views import render
from tailagent.web.views.task_lists import list_context
from tailagent.web.views.transcript import SECTIONS, Entry


def register_pages(desk_bp: Blueprint, kit: DeskKit) -> None:
    """Adds the list page (`/desk/`) and a task's page (`/desk/tasks/<id>`)."""

    @desk_bp.get("/")
    async def task_list() -> ResponseReturnValue:
        caller = current_caller()
        older = older_arg()
        found, waiting = await kit.lists.rows(caller, older)
        return render.page("list.html", kit.viewer(caller), **list_context(found, waiting, older))

    @desk_bp.get("/tasks/<task_id>")
    async def task_page(task_id: str) -> ResponseReturnValue:
        caller = current_caller()
        task = await kit.visible_task(caller, task_id)
        journal = await kit.parts.desk.journal(task_id)
        if journal is None:
            raise Refused(404, f"no task {task_id}")
        current = [c.entry for c in journal.changes.values() if c.entry is not None]
        by_section: dict[str, list[Entry]] = {s: [] for s in SECTIONS}
        for item in current:
            by_section[item.section].append(item)
        head = by_section["head"][0].data
        return render.page(
            "task.html",
            await kit.task_viewer(caller, head),
            task_id=task.id,
            title=head["title"],
            sections=SECTIONS,
            by_section=by_section,
            event_id=journal.event_id,
        )
