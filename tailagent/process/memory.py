"""Gives memory back after a burst.

A burst of requests leaves glibc's heap full of freed blocks that it keeps for
later; Python's own arenas return when emptied, but the C allocator's free lists
stay in the process. Once the server has been quiet for a moment after being busy,
a collection and `malloc_trim(0)` hand them back to the kernel.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

QUIET_SECONDS = 2.0
POLL_SECONDS = 0.25


def _trimmer() -> Callable[[], None] | None:
    # The process's own symbols: ctypes.util.find_library("c") would run ldconfig
    # in a child process, which a server's supervisor (or a test) sees come and go.
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


async def trim_when_quiet(activity: Callable[[], tuple[int, int]]) -> None:
    """Runs for the server's life; `activity` says (requests so far, requests not yet
    answered). Quiet: none in flight and none new for QUIET_SECONDS, counted from when
    the last one ended (what a burst holds is let go as its last responses end, not
    as its last requests come in)."""
    trim = _trimmer()
    last, _ = activity()
    trimmed = True
    quiet_for = 0.0
    while True:
        await asyncio.sleep(POLL_SECONDS)
        count, in_flight = activity()
        if count != last or in_flight:
            last, trimmed, quiet_for = count, False, 0.0
            continue
        quiet_for += POLL_SECONDS
        if not trimmed and quiet_for >= QUIET_SECONDS:
            gc.collect()
            if trim is not None:
                trim()
            trimmed = True
            log.debug("quiet for %.1f s: memory trimmed", quiet_for)
