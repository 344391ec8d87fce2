"""How tailagent runs Hypercorn on its socket: the configuration, and Hypercorn's own
log lines under a name that does not call each one an error.

Importing this module applies the two mends of how Hypercorn ends a connection
(mends/hypercorn_connections.py): they live with the other mends of dependencies'
internals, each with its version check.
"""

from __future__ import annotations

import logging
import os
import socket

from hypercorn.config import Config

from tailagent.listening.listener import LISTEN_BACKLOG
from tailagent.mends import hypercorn_connections  # noqa: F401  (applies the mends)


def _not_running_on(record: logging.LogRecord) -> bool:
    """Hypercorn's "Running on … (CTRL + C to quit)" repeats tailagent's own "serving on"
    line, with a hint that is wrong under systemd: it is left out."""
    return not record.getMessage().startswith("Running on ")


# Hypercorn's own lines (an app's failure, which stays an error) under a name that does
# not call every line an error, as "hypercorn.error" did, even its "Running on" at info.
HYPERCORN_LOG = logging.getLogger("hypercorn")
HYPERCORN_LOG.addFilter(_not_running_on)

# Long enough for Hypercorn to finish the responses already under way at stop.
GRACEFUL_TIMEOUT = 5.0


def hypercorn_config(sock: socket.socket) -> Config:
    """Hypercorn's configuration for serving on `sock`, which stays the caller's."""
    config = Config()
    # Hypercorn closes the socket it serves on; give it its own descriptor.
    config.bind = [f"fd://{os.dup(sock.fileno())}"]
    config.accesslog = None
    config.errorlog = HYPERCORN_LOG
    config.graceful_timeout = GRACEFUL_TIMEOUT
    # Hypercorn calls listen() again on the socket it is given, with its own backlog
    # (100 by default): a burst of new connections beyond it was dropped.
    config.backlog = LISTEN_BACKLOG
    return config
