"""Mends of dependencies' private internals, each applied only to the version it was
written for.

tailagent replaces a few private pieces of a2a-sdk, Hypercorn and acp, each in a module
of this folder named for what it mends (event_queues.py, sql_stores.py, tracing.py,
jsonrpc.py, required_fields.py, sse_ids.py, hypercorn_connections.py, acp_cancel.py).
Each was written
against one release's code; on another, a replaced method may no longer match what
calls it, or a module put in place may miss a name, and an upgrade would break the
server or quietly drop the mend. So each mend names the distribution and the
version(s) it was written for, and `applies` lets it in only on those. A mend refused
is not applied at all (never half), and the start says so, one WARNING line per mend
(`say_refused`, before "serving on").

Refused, rather than refusing to start: every one of these mends changes speed, memory
held, a log line, the code of an error (-32602 for -32600) or a stream's `id:` lines
(a client can still resume from `metadata.sequence`), never whether a caller is
answered or allowed, and the dependency's own
code, which a refused mend leaves in place, is right for its own version. An operator
whose pip brought a Hypercorn patch release (pyproject allows 0.18.x) keeps a working
server, told at each start what it lacks and what to do; the one-file binary is built
only from tailagent/binary/pins.txt, and tests/test_mends.py fails on any other
installed version, so a release never ships a mend refused.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from importlib import metadata


@dataclass(frozen=True)
class Mend:
    """One replacement of a dependency's private piece: `what` it replaces, in `dist` at
    the versions it was `written_for`, and what runs `without` it."""

    what: str
    dist: str
    written_for: tuple[str, ...]
    without: str

    def refusal(self, installed: str) -> str:
        """The line a start logs when the mend is refused: what, why, and what to do."""
        expected = " or ".join(self.written_for)
        return (
            f"mend left out: {self.what} is written for {self.dist} {expected}, and "
            f"{installed} is installed, so {self.without}; install {self.dist}=="
            f"{self.written_for[-1]}, as tailagent/binary/pins.txt pins it"
        )


# The lines of the mends refused in this process and not said yet (say_refused).
REFUSED: list[str] = []


@functools.cache
def installed_version(dist: str) -> str:
    """Looked up once per distribution: four mends ask for a2a-sdk's at start."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "none"


def applies(mend: Mend) -> bool:
    """Whether `mend` may be applied here: the installed `dist` is a version it was
    written for. If not, its refusal is kept for the start to say."""
    installed = installed_version(mend.dist)
    if installed in mend.written_for:
        return True
    line = mend.refusal(installed)
    if line not in REFUSED:
        REFUSED.append(line)
    return False


def say_refused(log: logging.Logger) -> None:
    """At start: one WARNING line for each mend refused in this process and not said
    yet. Called as the start begins and again before "serving on", for the mends of
    modules the start itself imports (the ACP client's, with an ACP agent)."""
    while REFUSED:
        log.warning("%s", REFUSED.pop(0))
