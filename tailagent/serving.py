"""How tailagent runs Hypercorn: its configuration, and one mend to how it lets go
of a connection its client has closed.

Hypercorn (0.18) keeps a kept-alive connection that its client closed (the socket
sits in CLOSE-WAIT) until the connection's keep-alive timer runs out, 5 s later:
the connection's task group waits for that timer before it closes the socket. So
every connection of a burst lived, with its parser, buffers and tasks, 5 s past
the client's goodbye, and what it held was freed after the quiet-time trim had
run (see memory.py): 1,000 streams left the server ~3 MiB higher, and the
descriptors of a thousand dead connections open. Stopping the timer once the
client's end is read lets the connection close at once, as it would with no
keep-alive at all.
"""

from __future__ import annotations

import logging
import os
import socket

from hypercorn.asyncio.tcp_server import TCPServer
from hypercorn.config import Config

from tailagent.listener import LISTEN_BACKLOG

# Long enough for Hypercorn to finish the responses already under way at stop.
GRACEFUL_TIMEOUT = 5.0

_read_until_eof = TCPServer._read_data


async def _read_then_let_go(self: TCPServer) -> None:
    await _read_until_eof(self)
    # The client is gone: no request can come on this connection any more.
    await self.idle_task.stop()


TCPServer._read_data = _read_then_let_go  # type: ignore[method-assign]


def hypercorn_config(sock: socket.socket) -> Config:
    """Hypercorn's configuration for serving on `sock`, which stays the caller's."""
    config = Config()
    # Hypercorn closes the socket it serves on; give it its own descriptor.
    config.bind = [f"fd://{os.dup(sock.fileno())}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.graceful_timeout = GRACEFUL_TIMEOUT
    # Hypercorn calls listen() again on the socket it is given, with its own backlog
    # (100 by default): a burst of new connections beyond it was dropped.
    config.backlog = LISTEN_BACKLOG
    return config
