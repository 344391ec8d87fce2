"""One inventory: each room says what it is in its own `__init__` (or a top-level
module's docstring), and docs/layout.md is written from those words (tests/layout_page.py)."""

from __future__ import annotations

from tests.layout_page import PAGE, first_words, render, room_path, sentences
from tests.test_layout import FLOORS, PACKAGE


def test_every_room_says_what_it_is_in_one_or_two_sentences() -> None:
    """A newcomer reads a room's first words to know whether to open it: one or two
    sentences, not a list of its files (that follows, in the docstring's next paragraph)."""
    rooms = [room_path(room) for _, floor in FLOORS for room in floor]
    rooms += [p for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE]
    wordy = {
        str(path.relative_to(PACKAGE.parent)): sentences(first_words(path))
        for path in rooms
        if not 1 <= sentences(first_words(path)) <= 2
    }
    assert wordy == {}


def test_the_layout_page_is_the_rooms_own_words() -> None:
    """docs/layout.md cannot drift from the rooms: rewrite it with
    `python -m tests.layout_page` when a room moves or its first words change."""
    assert PAGE.read_text() == render()
