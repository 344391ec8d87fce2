"""The approval desk: a web page on the node, a second face of the same bridge.

A person on the tailnet opens it with no login (whois says who they are), follows
tasks live, reads diffs and answers the agent's questions; a person on the box signs
in once with the link `tailagent web` prints. It reads tasks through the task store
and sends work and answers through the A2A request handler (routes.py), so it can
never do what A2A would refuse. The access layer applies the page's own rules to its
routes (access/browser.py, access/guard.py): same-origin POSTs only, and the sign-in
cookie counts here and nowhere else.

`server.py` builds the parts and calls `mount`; nothing else of the server knows
the page exists.
"""

from __future__ import annotations

from typing import Any

from quart import Quart

from tailagent.access.browser import DESK_PREFIX, opens_root
from tailagent.web.routes import DeskParts, blueprint

__all__ = ["DeskParts", "mount"]


def mount(app: Quart, parts: DeskParts, inner: Any) -> Any:
    """Adds the desk's routes to the server's Quart app and returns the ASGI app to
    serve: `inner`, with a browser opening the root sent on to the desk."""
    app.register_blueprint(blueprint(parts))

    async def front(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and opens_root(scope):
            location = f"{DESK_PREFIX}/".encode()
            headers = [(b"location", location), (b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 303, "headers": headers})
            await send({"type": "http.response.body", "body": b""})
            return
        await inner(scope, receive, send)

    return front
