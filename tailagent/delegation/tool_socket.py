"""The agent's one door to tailagent's own tools: a unix socket per conversation.

An ACP agent reaches tools only through MCP servers it starts itself, inside its fence,
where nothing of the server is in reach. tailagent's own MCP server (`mcp_stdio`, run by
the agent as `python -m tailagent.delegation.mcp_stdio SOCKET`, or `tailagent
--mcp-tools SOCKET` in the one-file binary, which has no `-m`) forwards each call
through this socket to the tools of the turn running now, the person's turn: a call
made between turns, or in a turn no person asked for (a token's, a tagged node's), is
refused, and a call can never act for another conversation.

Each conversation directory gets a folder of its own in the server's private runtime
directory (0700, and short: a unix socket's path is bounded at 107 bytes), and only that
folder is bound into that conversation's fence (sandbox/fences.py), so no other agent,
and nothing else of the server, is reachable through it.

On the socket, JSON lines: a call {"id", "tool": "list_peers" | "delegate", "args"} is
answered by {"id", "progress": line} for each step, then {"id", "result"} or
{"id", "error"} (a line the agent reads).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tailagent.agents.events import (
    NO_PERSON_TURN,
    DelegationFailed,
    JSONDict,
    Progress,
    TurnTools,
)
from tailagent.process.origin import binary_path, frozen, python_child

log = logging.getLogger("tailagent.delegation")

SOCKET_NAME = "tools.sock"
MAX_LINE = 1 << 20  # one call's JSON: a sub-task's message fits many times over
Send = Callable[[JSONDict], Awaitable[None]]
# The one-file binary's entry point runs mcp_stdio when given this (binary/entry.py).
MCP_ARGUMENT = "--mcp-tools"


def runtime_base() -> Path:
    """Where the server's private runtime directory is made: the session's runtime
    directory when there is one (memory, the user's own), else the temp directory."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.access(runtime, os.W_OK | os.X_OK):
        return Path(runtime)
    return Path(tempfile.gettempdir())


class ToolSocket:
    """One conversation's socket, listening while its agent session lives."""

    def __init__(self, path: Path, command: list[str]) -> None:
        self.path = path
        # How the agent runs the MCP server that speaks to this socket (the socket's
        # path as the agent sees it: inside a fence, where the folder is bound).
        self.command = command
        self._tools: TurnTools | None = None
        self._server: asyncio.Server | None = None
        self._calls: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.path.unlink(missing_ok=True)  # a session of this directory before
        self._server = await asyncio.start_unix_server(self._connected, self.path, limit=MAX_LINE)
        self.path.chmod(0o600)

    def serve(self, tools: TurnTools | None) -> None:
        """The tools of the turn that starts now; None when it ends."""
        self._tools = tools

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for call in list(self._calls):
            call.cancel()
        await asyncio.gather(*self._calls, return_exceptions=True)
        self.path.unlink(missing_ok=True)

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lock = asyncio.Lock()

        async def send(message: JSONDict) -> None:
            async with lock:
                writer.write(json.dumps(message).encode() + b"\n")
                await writer.drain()

        mine: set[asyncio.Task[None]] = set()
        try:
            while line := await reader.readline():
                call = asyncio.create_task(self._call(line, send))
                mine.add(call)
                self._calls.add(call)
                call.add_done_callback(mine.discard)
                call.add_done_callback(self._calls.discard)
        except (ValueError, ConnectionError):
            pass  # a line past MAX_LINE, or the agent's server went away
        finally:
            for call in mine:
                call.cancel()  # the agent no longer waits for these
            writer.close()

    async def _call(self, line: bytes, send: Send) -> None:
        try:
            request = json.loads(line)
            call_id = request["id"]
            tool, args = str(request["tool"]), dict(request.get("args") or {})
        except (ValueError, KeyError, TypeError):
            await send({"id": None, "error": "not a call: {id, tool, args} as JSON"})
            return

        async def progress(text: str) -> None:
            await send({"id": call_id, "progress": text})

        try:
            result = await self._run(tool, args, progress)
        except DelegationFailed as exc:
            await send({"id": call_id, "error": str(exc)})
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("tool %s failed", tool)
            await send({"id": call_id, "error": f"tailagent's {tool} failed: {exc}"})
        else:
            await send({"id": call_id, "result": result})

    async def _run(self, tool: str, args: JSONDict, progress: Progress) -> Any:
        tools = self._tools
        if tool not in ("list_peers", "delegate"):
            raise DelegationFailed(f"no tool {tool!r}: tailagent offers list_peers and delegate")
        if tools is None:
            raise DelegationFailed(NO_PERSON_TURN)
        if tool == "list_peers":
            return await tools.list_peers()
        peer, message = args.get("peer"), args.get("message")
        conversation = args.get("conversation")
        if not isinstance(peer, str) or not isinstance(message, str) or not peer or not message:
            raise DelegationFailed("delegate needs a peer and a message (both text)")
        if conversation is not None and not isinstance(conversation, str):
            raise DelegationFailed("delegate: conversation is a peer conversation's id (text)")
        return await tools.delegate(peer, message, conversation or None, progress)


class ToolSockets:
    """One per server: a private runtime directory, a folder in it per conversation
    directory, and how an agent starts the MCP server that reaches it."""

    def __init__(self, base: Path | None = None) -> None:
        self._base = base
        self._root: Path | None = None  # made on first use: a server whose start fails
        # before any agent session leaves nothing behind

    @property
    def root(self) -> Path:
        if self._root is None:
            base = self._base or runtime_base()
            self._root = Path(tempfile.mkdtemp(prefix="tailagent-", dir=base))
        return self._root

    def folder(self, directory: Path) -> Path:
        """The folder of the conversation working in `directory` (made now: a fence
        binds it before the agent's session, and its socket, exist)."""
        key = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:16]
        folder = self.root / key
        folder.mkdir(mode=0o700, exist_ok=True)
        return folder

    async def open(self, directory: Path, inside: Path | None = None) -> ToolSocket:
        """The listening socket of a session working in `directory`. `inside` is where
        the agent sees the folder (its fence's mount point), None: where it is."""
        path = self.folder(directory) / SOCKET_NAME
        seen = (inside / SOCKET_NAME) if inside is not None else path
        socket = ToolSocket(path, [*mcp_command(), str(seen)])
        await socket.start()
        return socket

    def close(self) -> None:
        root, self._root = self._root, None
        if root is not None:
            with contextlib.suppress(OSError):
                shutil.rmtree(root)


def mcp_command() -> list[str]:
    """How an agent starts tailagent's MCP server (the socket's path follows): the
    binary itself with MCP_ARGUMENT when frozen, else this interpreter on the module,
    never from the agent's working directory, where a `tailagent/` folder (a checkout)
    would shadow this package (process/origin.py's python_child)."""
    if frozen():
        return [str(binary_path()), MCP_ARGUMENT]
    return python_child("tailagent.delegation.mcp_stdio")
