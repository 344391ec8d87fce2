"""One build at a time: the suite runs on several pytest-xdist workers, and two modules
that need the same built thing (the one-file binary, Tailscale's binaries) may ask for it
at once. Without the lock both would build into the same place, and one would run a
file the other is still writing."""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def building(lock: Path) -> Iterator[None]:
    """Held while checking whether to build and building: a worker that waited here
    finds the other's build done and up to date."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)
