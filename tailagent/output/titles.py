"""A task's title: the first line of what the caller asked, as the desk, its phone
view and `tailagent tasks` all show it (one rule, so a task reads the same everywhere).

Pure: reads the task's history only, so a client holding a listed task (ListTasks
with its history) names it as the server's page does.
"""

from __future__ import annotations

from a2a.types.a2a_pb2 import Role, Task
from google.protobuf.json_format import MessageToDict

TITLE_CHARS = 160  # a title, or what a waiting row asks: the whole is a tap away


def shorten(text: str, limit: int) -> str:
    """The first `limit` characters, marked when cut: a 2.5 MB prompt must not make a
    page millions of pixels tall."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def first_prompt(task: Task) -> str:
    """The first line of what the caller asked, shortened: the task's title everywhere."""
    for message in task.history:
        if message.role == Role.ROLE_USER:
            text = "".join(p.text for p in message.parts if p.HasField("text")).strip()
            if text:
                return shorten(text.splitlines()[0], TITLE_CHARS)
            data = [MessageToDict(p.data) for p in message.parts if p.HasField("data")]
            found = [value for value in data if isinstance(value, dict)]
            return shorten(str(found[0]), TITLE_CHARS) if found else "(no text)"
    return "(no prompt)"
