"""The card signer child's entry, run by its path (card/publish.py's signer_command): it
enters the tailagent package without running the package's `__init__`.

That `__init__` is for a server or a command: it mends a2a-sdk's event queues and SQL
stores for the version installed (importing asyncio and importlib.metadata to check it),
none of which signing touches: ~90 ms of CPU (`python -P -c 'import tailagent'`
against `-c pass`) at every server start. What it does first, making the process not dumpable
when its environment may hold a secret (process/undumpable.py), is done here first too,
before the private key is read. Standard library only until then.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path


def enter_package_bare() -> None:
    """Puts the tailagent package this file is part of in sys.modules, its `__init__`
    not run, so its modules import from this very tree (as `-m` from the server's
    interpreter would) and nothing from the current directory."""
    package = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location(
        "tailagent", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    assert spec is not None  # a file location always makes one
    sys.modules["tailagent"] = importlib.util.module_from_spec(spec)


if __name__ == "__main__":
    enter_package_bare()
    importlib.import_module("tailagent.process.undumpable")
    importlib.import_module("tailagent.card.signer").main()
