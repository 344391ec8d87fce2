"""The task a name on the command line means: its whole id, or the start of one.

A task's id is a 36-character UUID, long to type and cut in narrow tables; people type
back its start, as they do a conversation's. The server takes whole ids only (A2A
names a task by its id), so `watch` and `cancel` find the task the start fits among
the caller's own latest tasks (a server lists each caller only its own), and ask for
more of the id, or the whole one, when that does not name exactly one.
A conversation goes by a short id of its own: its branch's (`short_context`).
"""

from __future__ import annotations

import uuid

from a2a.client import Client
from a2a.types.a2a_pb2 import ListTasksRequest, Task
from google.protobuf.json_format import MessageToDict

from tailagent.client.errors import UsageError

PAGE = 100
SEARCHED = 1000  # a start is looked for among this many of the caller's latest tasks
SHOWN = 5  # of the tasks a start fits, the refusal names this many


def is_whole(name: str) -> bool:
    """Whether `name` is a whole task id (what the server mints: a UUID as text)."""
    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


async def whole_task_id(client: Client, name: str) -> str:
    """The id of the one task of the caller's whose id starts with `name` (`name`
    itself when it is a whole id). Refuses a start that fits several, or none among
    the latest SEARCHED; a start that fits none of fewer goes on as it is, for the
    server to answer "not found" as it does any unknown id."""
    if is_whole(name) or not name:
        return name
    found: list[str] = []
    seen, token = 0, ""
    while True:
        request = ListTasksRequest(page_size=PAGE, page_token=token, history_length=0)
        page = await client.list_tasks(request)
        found += [task.id for task in page.tasks if task.id.startswith(name)]
        seen += len(page.tasks)
        token = page.next_page_token
        if not token or seen >= SEARCHED:
            break
    if len(found) > 1:
        more = ", …" if len(found) > SHOWN else ""
        raise UsageError(
            f"{name} is the start of {len(found)} of your tasks "
            f"({', '.join(found[:SHOWN])}{more}): give more of its id"
        )
    if not found and token:
        raise UsageError(
            f"none of your latest {seen} tasks starts with {name}: give the task's whole id"
        )
    return found[0] if found else name


def short_context(task: Task) -> str:
    """The task's conversation as diff, merge and discard take it: the short id its
    branch shows (`tailagent/<short id>`), else the first 8 characters of its id."""
    meta = MessageToDict(task.metadata) if task.HasField("metadata") else {}
    branch = str((meta.get("worktree") or {}).get("branch") or "")
    return branch.removeprefix("tailagent/") or task.context_id[:8]
