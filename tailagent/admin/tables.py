"""How the owner's commands print a table: each cell as text, escaped, on a console as
wide as the terminal (or wide enough to keep a piped row whole)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.text import Text

from tailagent.output.visible import visible

PIPED_WIDTH = 240


def cells(*values: str) -> list[Text]:
    """A table row's cells as text, escaped: none is read as markup or acts on the
    terminal (a reason `no [/]` is shown as written, not refused by rich)."""
    return [Text(visible(value)) for value in values]


def console() -> Console:
    """A terminal's own width; a wide one when piped, so rows stay whole for grep."""
    return Console(width=None if sys.stdout.isatty() else PIPED_WIDTH)
