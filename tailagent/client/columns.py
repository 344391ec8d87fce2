"""A list's columns fitted to the terminal by tailagent, not by rich's last resort.

Left to itself, a rich table wider than the terminal cuts every column evenly once the
wrappable ones are spent: one long file name took `tailagent conversations` down to
2-character ids and hid its `+/-` and state columns, and `tasks` cut the conversation
a person types into `diff` to 6 characters. Here each column is as wide as its widest
cell while all fit; when they do not, the widest of the others gives way first, each
down to its `least`, and only then an id, never below `ID_LEAST`. A cell wider than
its column wraps inside it: nothing is cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

GAP = 2  # between two columns (rich's padding)
ID_LEAST = 8  # an id a person types back is never narrower: `diff`'s short ids


@dataclass(frozen=True)
class Column:
    """One column: its header, its cells (already made visible, one line each), how
    narrow it may be made (`least`; None: never narrower than its widest cell), and
    when it gives way (`rank`: the lowest first; ids a person types back last)."""

    header: str
    cells: list[str]
    least: int | None = 12
    rank: int = 0
    justify: Literal["left", "right"] = "left"

    def wanted(self) -> int:
        return max([cell_len(self.header), *(cell_len(cell) for cell in self.cells)])

    def floor(self, rank: int) -> int:
        """The narrowest it is made while the columns up to `rank` give way."""
        if self.least is None or self.rank > rank:
            return self.wanted()
        return min(self.wanted(), self.least)


def widths(columns: list[Column], room: int) -> list[int]:
    """Each column's width within `room` characters (gaps included): its widest cell
    while all fit; else the widest column of the lowest rank gives one character at a
    time, down to its least, then those of the next rank. Wider than `room` only when
    even every column at its least is (a terminal narrower than any useful list)."""
    sizes = [column.wanted() for column in columns]
    for rank in sorted({column.rank for column in columns}):
        floors = [column.floor(rank) for column in columns]
        while sum(sizes) + GAP * (len(sizes) - 1) > room:
            giving = [i for i, size in enumerate(sizes) if size > floors[i]]
            if not giving:
                break
            sizes[max(giving, key=lambda i: sizes[i])] -= 1
    return sizes


def fitted(columns: list[Column], room: int) -> Table:
    """A borderless table of `columns` (their cells row by row) within `room`: each
    column at its width from `widths`, a longer cell wrapped inside it, word by word,
    and a word longer than the column folded."""
    table = Table(box=None, pad_edge=False)
    for column, width in zip(columns, widths(columns, room), strict=True):
        table.add_column(column.header, width=width, overflow="fold", justify=column.justify)
    for row in zip(*(column.cells for column in columns), strict=True):
        table.add_row(*(Text(cell) for cell in row))
    return table
