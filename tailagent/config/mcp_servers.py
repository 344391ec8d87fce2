"""MCP servers the operator hands every agent session (`[[mcp_servers]]`), as the
configuration states them: read with the settings, passed to the agents."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class McpServer:
    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None


def parse_mcp_servers(value: Any) -> tuple[McpServer, ...]:
    if not isinstance(value, list):
        raise ValueError("MCP servers are [[mcp_servers]] tables in the config file")
    servers = []
    for number, table in enumerate(value, 1):
        if not isinstance(table, dict) or not isinstance(table.get("name"), str):
            raise ValueError(f"MCP server {number}: a table with a `name` is required")
        unknown = set(table) - {"name", "command", "args", "env", "url"}
        if unknown:
            raise ValueError(f"MCP server {number}: unknown key {sorted(unknown)[0]!r}")
        command, url = table.get("command"), table.get("url")
        if (command is None) == (url is None):
            raise ValueError(f"MCP server {number}: give either `command` (stdio) or `url` (http)")
        args, env = table.get("args", []), table.get("env", {})
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"MCP server {number}: `args` is a list of strings")
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise ValueError(f"MCP server {number}: `env` is a table of strings")
        servers.append(McpServer(table["name"], command, tuple(args), dict(env), url))
    return tuple(servers)
