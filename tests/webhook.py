"""What the push tests' and the push benchmark's webhook receivers share: Hypercorn
on a loopback port of their own, and reading an ASGI request's body."""

from __future__ import annotations

import socket
from typing import Any

from hypercorn.config import Config


def loopback_config() -> tuple[Config, int]:
    """A Hypercorn config that serves on a free loopback port, and that port. The port
    is bound here, so it is known (and taken) before serving starts."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = int(sock.getsockname()[1])
    config = Config()
    config.bind = [f"fd://{sock.detach()}"]  # Hypercorn owns and closes it now
    config.accesslog = None
    return config, port


async def request_body(receive: Any) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body
