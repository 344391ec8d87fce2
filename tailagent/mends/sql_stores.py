"""a2a-sdk's SQL stores, kept out of a process until one is used.

a2a-sdk imports its database stores, and SQLAlchemy with them (~18 MiB), from the
packages every server imports (`a2a.server.tasks`, `a2a.server.cluster`), whenever
SQLAlchemy is installed. A server on the default SQLite store needs them only for a
request tailagent leaves to the SDK (see store/sdk_stores.py). The SDK falls back
to placeholders when their import fails, as it does without SQLAlchemy installed;
`defer_sql_modules` makes it fail that way (a None in sys.modules), and
`load_sql_module` imports one for real when it is needed. Written for a2a-sdk 1.3.0's
module names and fallbacks; on another version they are imported as the SDK does
(mends/versions.py).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from tailagent.mends.versions import Mend, applies

DEFERRED = (
    "a2a.server.tasks.database_task_store",
    "a2a.server.tasks.database_push_notification_config_store",
    "a2a.server.cluster.database_event_stream",
    "a2a.server.cluster.database_task_store",
)
SQL_MEND = Mend(
    what="a2a-sdk's SQL stores left out until used (mends/sql_stores.py)",
    dist="a2a-sdk",
    written_for=("1.3.0",),
    without="every server imports them and SQLAlchemy at start (~18 MiB more)",
)


def defer_sql_modules() -> None:
    """Before a2a-sdk's server packages are imported: leaves their SQL stores out."""
    if not applies(SQL_MEND):
        return
    for name in DEFERRED:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]


def load_sql_module(name: str) -> ModuleType:
    """One of a2a-sdk's SQL store modules, imported now (import it only through here:
    the package's own attribute for it is a placeholder once deferred)."""
    if name in sys.modules and sys.modules[name] is None:
        del sys.modules[name]
    return importlib.import_module(name)
