"""docs/layout.md, written from the house itself: each room's own first words (the
opening paragraph of its `__init__` docstring, or a top-level module's), stood on the
floors tests/test_layout.py checks, with the arrows it forbids. One inventory: a room
says what it is where it lives, and the page cannot drift from it
(tests/test_layout.py::test_the_layout_page_is_the_rooms_own_words).

Rewrite the page after a room moves or its words change:

    python -m tests.layout_page
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_layout import FLOORS, FORBIDDEN, PACKAGE

PAGE = PACKAGE.parent / "docs" / "layout.md"
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(])")

INTRO = """\
# Layout

The folder layout is the architecture: a folder names a concept, a file a piece of it,
and a person who knows what they want to change finds the one folder by its name. The
package is built in floors: a room imports rooms on its own floor or below, never above,
so a change low down never needs one higher up; inside every folder, at every depth, its
rooms import each other one way only. `tests/test_layout.py` holds the floors (a new
room is given one there) and checks them from the imports, along with no folder of more
than 15 modules (the package root, 12), no two modules in a folder whose names are built
on one word, no class over 300 lines and no function over 80.

This page is written by `python -m tests.layout_page` from each room's own first words
(its `__init__.py`), so what a room is said to be is said once, where it lives; a room's
docstring goes on to name its files. A logger is named for its module, or for a room
it lives in when the room speaks with one voice (`tailagent.access`, a line per request;
`tailagent.agents`; `tailagent.sandbox`), and `tailagent` says the start's lines. From
the top floor down:
"""

OUTRO = """\
Besides the floors, arrows that must never exist (`FORBIDDEN` in tests/test_layout.py):

{forbidden}

[Back to the README](../README.md)
"""


def first_words(path: Path) -> str:
    """The opening paragraph of a module's docstring, on one line."""
    docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(docstring.split("\n\n")[0].split())


def sentences(text: str) -> int:
    return len([part for part in SENTENCE_END.split(text) if part.strip()])


def room_path(room: str) -> Path:
    folder = PACKAGE / room
    return folder / "__init__.py" if folder.is_dir() else PACKAGE / f"{room}.py"


def inner_rooms(folder: Path, depth: int) -> list[str]:
    """A folder's sub-folders, each with its first words, and theirs below it."""
    lines = []
    for inner in sorted(p.parent for p in folder.glob("*/__init__.py")):
        indent = "  " * depth
        lines.append(f"{indent}- `{inner.name}/`: {first_words(inner / '__init__.py')}")
        lines += inner_rooms(inner, depth + 1)
    return lines


def render() -> str:
    parts = [INTRO]
    for title, rooms in reversed(FLOORS):
        parts.append(f"### {title[0].upper()}{title[1:]}\n")
        for room in sorted(rooms):
            path = room_path(room)
            name = f"tailagent/{room}/" if path.name == "__init__.py" else f"tailagent/{room}.py"
            parts.append(f"- `{name}`: {first_words(path)}")
            if path.name == "__init__.py":
                parts += inner_rooms(path.parent, 1)
        parts.append("")
    forbidden = "\n".join(
        f"- `{importer}` never imports `{imported}`: {why}."
        for importer, imported, why in FORBIDDEN
    )
    parts.append(OUTRO.format(forbidden=forbidden))
    return "\n".join(parts)


if __name__ == "__main__":
    PAGE.write_text(render())
    print(f"wrote {PAGE.relative_to(PACKAGE.parent)}")
