"""The head's hygiene, asked of every request before anything else: it did not come
through Tailscale Funnel, and its Host names this server.

Funnel brings the whole internet, which has no tailnet identity to check. A Host that
names another server is how a DNS-rebound page would reach the loopback port: under
its own name, with the browser's same-origin rules on its side. Both are refused from
the head alone, whatever route it asks for, the public ones included.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from tailagent.access.asgi import ASGI, headers_of
from tailagent.access.refusals import refuse
from tailagent.access.resolve import Resolver, TailnetSelf


class NoFunnel:
    """Refuses what Tailscale Funnel forwards (it marks each request so)."""

    def __init__(self, app: ASGI) -> None:
        self._app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and headers_of(scope).get(b"tailscale-funnel-request"):
            message = "requests from Tailscale Funnel are refused"
            await refuse(scope, receive, send, 403, "FUNNEL", 0, message)
            return
        await self._app(scope, receive, send)


def _host_name(host_header: str) -> str:
    """The host part of a Host header, lower case, without port or brackets."""
    return (urlsplit(f"//{host_header}").hostname or "").lower()


class ServedHost:
    """Refuses a request whose Host is none of this server's names: the listen address
    and the public URL's host (`hosts`), the node's tailnet addresses, its MagicDNS
    name and the short one people type (http://agentbox/)."""

    def __init__(self, app: ASGI, *, hosts: set[str], resolver: Resolver) -> None:
        self._app = app
        self._hosts = {h.lower() for h in hosts}
        self._resolver = resolver

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            host = headers_of(scope).get(b"host", "")
            if not self._allowed(host, await self._resolver.current_self()):
                message = f"Host {host!r} does not name this server"
                await refuse(scope, receive, send, 403, "HOST", 0, message)
                return
        await self._app(scope, receive, send)

    def _allowed(self, host_header: str, me: TailnetSelf) -> bool:
        name = _host_name(host_header)
        if name in self._hosts or name in me.addresses:
            return True
        return me.dns_name is not None and name in (me.dns_name, me.dns_name.split(".")[0])
