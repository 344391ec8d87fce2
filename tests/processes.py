"""Looking at processes from the tests: is one alive, which are a server's children."""

from __future__ import annotations

import os
from pathlib import Path


def alive(pid: int) -> bool:
    """Running, and not merely a zombie waiting to be reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def children(pid: int) -> list[int]:
    """The live child processes of `pid` (say, a server's agent processes)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split() if alive(int(p))]
