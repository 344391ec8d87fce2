"""`tailagent serve` with a2a-sdk's in-memory task store: the floor of the request path.

For bench_core.py --floor only. Comparing it with the real server shows what
persistence costs and what the a2a-sdk request path costs by itself.
"""

import os
import sys

from a2a.server.tasks import InMemoryTaskStore

import tailagent.server


async def _nothing_to_recover(store: object, server: str) -> list[object]:
    return []


tailagent.server.DatabaseTaskStore = lambda engine: InMemoryTaskStore()  # type: ignore[assignment,misc]
tailagent.server.close_unfinished_tasks = _nothing_to_recover  # type: ignore[assignment]

if __name__ == "__main__":
    os.environ.setdefault("OTEL_INSTRUMENTATION_A2A_SDK_ENABLED", "false")
    from tailagent.cli import main

    sys.exit(main(sys.argv[1:]))
