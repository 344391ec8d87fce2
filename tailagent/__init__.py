"""tailagent: a coding agent on your tailnet, spoken to over A2A."""

import sys

# First of ours, in every way tailagent starts: a process whose environment may hold a
# secret is made not dumpable before anything else runs (process/undumpable.py).
import tailagent.process.undumpable  # noqa: F401
from tailagent.mends.event_queues import use_asyncio_queues
from tailagent.mends.sql_stores import defer_sql_modules
from tailagent.version import __version__ as __version__

# httpx imports its own command-line tool when rich is installed (as it is here, for
# ours), and with it rich's syntax highlighting, progress bars, pygments and click:
# ~70 modules and ~3 MiB in every process, used by none. Blocking that one module
# leaves httpx its fallback, which only says to install its CLI extra.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
# sse_starlette (a2a-sdk's streams) imports uvicorn, when it can, to patch its exit
# handler, and uvicorn (installed for mcp, which imports it only to serve over HTTP,
# never done here) its config, logging setup and click: ~30 ms of CPU at every start
# of a server that Hypercorn serves. Unimportable, it leaves sse_starlette its fallback
# (a server's shutdown is ours: stop_turns).
sys.modules.setdefault("uvicorn", None)  # type: ignore[arg-type]

defer_sql_modules()
use_asyncio_queues()
