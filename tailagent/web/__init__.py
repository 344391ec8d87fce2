"""The approval desk: a web page on the node, a second face of the same bridge.

A person on the tailnet opens it with no login (whois says who they are), follows
tasks live, reads diffs and answers the agent's questions; a person on the box signs
in once with the link `tailagent web` prints. It reads tasks through the task store
and sends work and answers through the A2A request handler (web/route_kit.py), so it
can never do what A2A would refuse. Its mount keeps the browser's rules apart from
the API's (web/browser_rules.py): same-origin changes only, and the sign-in cookie
(web/sessions.py) counts here and nowhere else.

Here, from the floor up: what a page shows (web/views/: the transcript, the live
journals, the HTML renderer), the sign-in sessions and the browser's rules, form
tokens and the caller, what the desk uses of the server (parts), a conversation's
standing as a page is drawn, what every route is given (route_kit); then the pages'
routes (web/routes/) and the notifications' routes (web/notifications/; Web Push
itself is tailagent/webpush/), and the app that mounts them with its rules (desk_app).

`tailagent/app.py` builds the parts and the rules and calls `mount`; nothing else of
the server knows the page exists. The page's Quart app, its templates and routes (~11 MiB of a
server's memory) are loaded on the first request for the page: a server that only A2A
programs call never holds them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from tailagent.access.asgi import ASGI
from tailagent.web.browser_rules import BrowserRules, is_page_request, opens_root
from tailagent.web.sessions import DESK_PREFIX

if TYPE_CHECKING:
    from quart import Quart

    from tailagent.web.parts import DeskParts


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


def mount(desk: LazyDesk, api: ASGI, rules: BrowserRules) -> ASGI:
    """The ASGI app behind the access line: a page request (a desk path, a browser
    opening the root) through the browser's rules to the desk, everything else (and
    the lifespan) to `api`, behind the API's own rules."""
    pages = rules.around(_opened(desk))

    async def front(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and is_page_request(scope):
            await pages(scope, receive, send)
            return
        await api(scope, receive, send)

    return front


def _opened(desk: LazyDesk) -> ASGI:
    """The desk, with a browser opening the root sent on to it."""

    async def opened(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if opens_root(scope):
            location = f"{DESK_PREFIX}/".encode()
            headers = [(b"location", location), (b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 303, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        await desk(scope, receive, send)

    return opened
