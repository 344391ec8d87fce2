"""The embedded node's shared library, loaded with ctypes.

The library's calls block (joining the tailnet, logging out), so the async
wrappers run them on a worker thread; ctypes releases the GIL meanwhile.
Answers are JSON, and every string the library hands back is freed by it.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import shutil
import threading
from pathlib import Path
from typing import Any

from tailagent.tailnet.tsnet.build import GO_HINT, LIBRARY_NAME

LIBRARY_ENV = "TAILAGENT_TSNET_LIBRARY"
HERE = Path(__file__).resolve().parent


class LibraryMissing(Exception):
    """The embedded node is not built into this install; str() says how to get it."""


def library_path() -> Path:
    configured = os.environ.get(LIBRARY_ENV)
    return Path(configured) if configured else HERE / LIBRARY_NAME


def missing_reason(path: Path) -> str:
    how = GO_HINT
    if shutil.which("go") is not None:
        how = (
            "reinstall tailagent with Go on PATH (pip install .), or build it in a checkout "
            "with `python tailagent/tailnet/tsnet/build.py`"
        )
    return f"this tailagent has no embedded tailnet node ({path} is missing): {how}"


class NodeLibrary:
    """One loaded copy of the library; a process loads it at most once."""

    _loaded: NodeLibrary | None = None
    _lock = threading.Lock()

    def __init__(self, path: Path) -> None:
        lib = ctypes.CDLL(str(path))
        lib.tailagent_node_start.argtypes = [ctypes.c_char_p]
        lib.tailagent_node_status.argtypes = [ctypes.c_longlong]
        lib.tailagent_node_close.argtypes = [ctypes.c_longlong, ctypes.c_int]
        lib.tailagent_node_free.argtypes = [ctypes.c_void_p]
        for name in ("start", "status", "close", "version"):
            getattr(lib, f"tailagent_node_{name}").restype = ctypes.c_void_p
        self._lib = lib
        self.path = path

    @classmethod
    def load(cls) -> NodeLibrary:
        with cls._lock:
            if cls._loaded is None:
                path = library_path()
                if not path.is_file():
                    raise LibraryMissing(missing_reason(path))
                cls._loaded = cls(path)
            return cls._loaded

    def _take(self, pointer: int | None) -> str:
        if not pointer:
            return ""
        try:
            return ctypes.string_at(pointer).decode()
        finally:
            self._lib.tailagent_node_free(pointer)

    def _json(self, pointer: int | None) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(self._take(pointer) or "{}")
        return answer

    def version(self) -> str:
        """The tailscale.com release the library was built on."""
        return self._take(self._lib.tailagent_node_version())

    async def start(self, config: dict[str, Any]) -> dict[str, Any]:
        raw = json.dumps(config).encode()
        return await asyncio.to_thread(lambda: self._json(self._lib.tailagent_node_start(raw)))

    async def status(self, handle: int) -> dict[str, Any]:
        return await asyncio.to_thread(lambda: self._json(self._lib.tailagent_node_status(handle)))

    async def close(self, handle: int, *, logout: bool) -> dict[str, Any]:
        return await asyncio.to_thread(
            lambda: self._json(self._lib.tailagent_node_close(handle, int(logout)))
        )
