"""a2a-sdk's event queues on asyncio's Queue, before Python 3.13 too.

a2a-sdk moves every event of a task through queues it makes in one place
(`a2a.utils._async_queue_compat`): on Python 3.13 and later they are asyncio's
`Queue`, whose `shutdown` they need; before 3.13 they are culsans queues, which are
also safe across threads and built on aiologic's primitives. The SDK uses them from
the event loop only, so that safety buys nothing here, and on a streamed send it costs
the server ~14 % more CPU (docs/measured.md, issue 36; a blocking send of a new task
goes past the queues, bridge/requests/quick.py). `use_asyncio_queues`, called before
a2a-sdk is imported, puts in that module's place one that makes the queues 3.13 makes,
from the backport of its `Queue` (`backports.asyncio.queues`), so culsans and aiologic
are never imported. Written for a2a-sdk 1.3.0's module (its three names); on another
version the SDK's own queues stay (mends/versions.py).
"""

from __future__ import annotations

import sys
from types import ModuleType

from tailagent.mends.versions import Mend, applies

COMPAT_MODULE = "a2a.utils._async_queue_compat"
QUEUES_MEND = Mend(
    what=f"a2a-sdk's queues on asyncio's Queue ({COMPAT_MODULE} replaced, mends/event_queues.py)",
    dist="a2a-sdk",
    written_for=("1.3.0",),
    without="its queues stay culsans' (a stream costs the server ~14 % more CPU)",
)


def use_asyncio_queues() -> None:
    """Before a2a-sdk is imported: its queues become asyncio's, as on Python 3.13."""
    if sys.version_info >= (3, 13) or COMPAT_MODULE in sys.modules:
        return  # 3.13's own, or too late: the SDK's modules hold the old names
    if not applies(QUEUES_MEND):
        return
    from backports.asyncio.queues import Queue, QueueShutDown

    def create_async_queue(maxsize: int = 0) -> Queue[object]:
        return Queue(maxsize=maxsize)

    compat = ModuleType(COMPAT_MODULE, __doc__)
    compat.AsyncQueue = Queue  # type: ignore[attr-defined]
    compat.QueueShutDown = QueueShutDown  # type: ignore[attr-defined]
    compat.create_async_queue = create_async_queue  # type: ignore[attr-defined]
    compat.__all__ = ["AsyncQueue", "QueueShutDown", "create_async_queue"]  # type: ignore[attr-defined]
    sys.modules[COMPAT_MODULE] = compat
