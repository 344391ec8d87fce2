"""tailagent's MCP server for an ACP agent: `python -m tailagent.delegation.mcp_stdio SOCKET`.

The agent starts it (session/new names it among its MCP servers), inside the agent's
fence, where the network and the server are out of reach: it offers the agent
`list_peers` and `delegate` and forwards each call through SOCKET, the one door its
conversation has to the server (tool_socket.py), relaying the server's progress lines
as MCP progress notifications. It holds no secret and decides nothing: the server
checks each call against the turn that is running.

It runs as the agent's child in the fence, so it imports only the `mcp` package and the
standard library (nothing of tailagent's that reads state, config or the network).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

NAME = "tailagent"
MAX_LINE = 1 << 24  # a peer's answer, as JSON


class Door:
    """The socket to the server, one connection shared by the calls the agent makes."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._writer: asyncio.StreamWriter | None = None
        self._waiting: dict[int, asyncio.Queue[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()

    async def _connect(self) -> asyncio.StreamWriter:
        async with self._lock:
            if self._writer is None or self._writer.is_closing():
                reader, self._writer = await asyncio.open_unix_connection(
                    self._path, limit=MAX_LINE
                )
                asyncio.get_running_loop().create_task(self._read(reader))
            return self._writer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                message = json.loads(line)
                queue = self._waiting.get(message.get("id"))
                if queue is not None:
                    queue.put_nowait(message)
        except (ValueError, ConnectionError):
            pass
        gone = {"error": "tailagent's server closed the tools' socket"}
        for queue in self._waiting.values():
            queue.put_nowait(gone)

    async def call(self, tool: str, args: dict[str, Any], ctx: Context[Any, Any]) -> Any:
        """The tool's result; each progress line becomes a progress notification."""
        try:
            writer = await self._connect()
        except OSError as exc:
            raise ToolError(f"tailagent's tools are out of reach ({exc})") from None
        call_id = next(self._ids)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._waiting[call_id] = queue
        try:
            writer.write(json.dumps({"id": call_id, "tool": tool, "args": args}).encode() + b"\n")
            await writer.drain()
            steps = 0
            while True:
                message = await queue.get()
                if "progress" in message:
                    steps += 1
                    await ctx.report_progress(steps, None, str(message["progress"]))
                elif "error" in message:
                    raise ToolError(str(message["error"]))
                else:
                    return message.get("result")
        finally:
            del self._waiting[call_id]


def server(door: Door) -> MCPServer[Any]:
    mcp: MCPServer[Any] = MCPServer(
        NAME,
        log_level="WARNING",  # its stderr is the agent's: a line per call is noise there
        instructions=(
            "tailagent's own tools: the other tailagents on this tailnet, and handing one "
            "of them a sub-task on behalf of the person whose task this is."
        ),
    )

    @mcp.tool()
    async def list_peers(ctx: Context[Any, Any]) -> str:
        """The tailagents on this tailnet this node may hand work to: name, url, agent,
        skills (JSON)."""
        return json.dumps(await door.call("list_peers", {}, ctx))

    @mcp.tool()
    async def delegate(
        peer: str, message: str, ctx: Context[Any, Any], conversation: str | None = None
    ) -> str:
        """Hands `message` to `peer` (a name list_peers gave) as a sub-task of the person
        whose task this is, and returns the peer's answer. The person may be asked first.
        `conversation` continues an earlier hand-off's peer conversation."""
        args = {"peer": peer, "message": message, "conversation": conversation}
        return str(await door.call("delegate", args, ctx))

    return mcp


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(
            "usage: python -m tailagent.delegation.mcp_stdio SOCKET (the binary: "
            "tailagent --mcp-tools SOCKET)",
            file=sys.stderr,
        )
        return 2
    asyncio.run(server(Door(argv[0])).run_stdio_async())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
