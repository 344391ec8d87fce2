"""The approval desk: a web page on the node, a second face of the same bridge.

A person on the tailnet opens it with no login (whois says who they are), follows
tasks live, reads diffs and answers the agent's questions; a person on the box signs
in once with the link `tailagent web` prints. It reads tasks through the task store
and sends work and answers through the A2A request handler (web/route_kit.py), so it
can never do what A2A would refuse. The access layer applies the page's own rules to
its routes (access/browser.py, access/guard.py): same-origin POSTs only, and the
sign-in cookie counts here and nowhere else.

Here, from the floor up: what a page shows (web/views/: the transcript, the live
journals, the HTML renderer), form tokens and the caller, what the desk uses of the
server (parts), a conversation's standing as a page is drawn, what every route is given
(route_kit); then the pages' routes (web/routes/) and the notifications' routes
(web/notifications/; Web Push itself is tailagent/webpush/), and the app that mounts
them with its rules (desk_app).

`tailagent/app.py` builds the parts and calls `mount`; nothing else of the server
knows the page exists. The page's Quart app, its templates and routes (~11 MiB of a
server's memory) are loaded on the first request for the page: a server that only A2A
programs call never holds them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from tailagent.access.browser import DESK_PREFIX, opens_root

if TYPE_CHECKING:
    from quart import Quart

    from tailagent.web.parts import DeskParts

ASGI = Any  # (scope, receive, send) -> None, as Hypercorn calls it


class LazyDesk:
    """The desk's ASGI app, built and started on its first request."""

    def __init__(self, parts: DeskParts) -> None:
        self._parts = parts
        self._app: Quart | None = None
        self._building = asyncio.Lock()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self._app is None:
            async with self._building:
                if self._app is None:
                    from tailagent.web.desk_app import desk_app  # Quart and Jinja, only now

                    app = desk_app(self._parts)
                    await app.startup()
                    self._app = app
        # Quart's types name its own scopes; these are Hypercorn's plain dicts.
        await self._app(cast("Any", scope), receive, send)

    async def aclose(self) -> None:
        if self._app is not None:
            await self._app.shutdown()


def is_desk_path(path: str) -> bool:
    return path == DESK_PREFIX or path.startswith(DESK_PREFIX + "/")


def mount(desk: LazyDesk, inner: ASGI) -> ASGI:
    """The ASGI app to serve: the desk's paths to the desk, a browser opening the root
    sent on to it, everything else to `inner`."""

    async def front(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if opens_root(scope):
                location = f"{DESK_PREFIX}/".encode()
                headers = [(b"location", location), (b"content-length", b"0")]
                await send({"type": "http.response.start", "status": 303, "headers": headers})
                await send({"type": "http.response.body", "body": b""})
                return
            if is_desk_path(scope["path"]):
                await desk(scope, receive, send)
                return
        await inner(scope, receive, send)

    return front
