"""Two mends of how Hypercorn ends a connection: one its client has closed is let go at
once, and one the stop cuts is said in one warning line, not an asyncio traceback.

Hypercorn (0.18) keeps a kept-alive connection that its client closed (the socket
sits in CLOSE-WAIT) until the connection's keep-alive timer runs out, 5 s later:
the connection's task group waits for that timer before it closes the socket. So
every connection of a burst lived, with its parser, buffers and tasks, 5 s past
the client's goodbye, and what it held was freed after the quiet-time trim had
run (see process/memory.py): 1,000 streams left the server ~3 MiB higher, and the
descriptors of a thousand dead connections open. Stopping the timer once the
client's end is read lets the connection close at once, as it would with no
keep-alive at all.

Both are applied when this module is imported (listening/serving.py imports it with
Hypercorn's configuration). Both are written for Hypercorn 0.18.0; on another version
each is left out and the start says so (mends/versions.py). A third, which sent a
response's head and body in one send, is gone: its gain was within noise
(docs/measured.md, issue 36).
"""

from __future__ import annotations

import asyncio
import logging

from hypercorn.asyncio.tcp_server import TCPServer

from tailagent.mends.versions import Mend, applies

log = logging.getLogger("tailagent")

HYPERCORN = ("hypercorn", ("0.18.0",))
LET_GO_MEND = Mend(
    "Hypercorn's TCPServer._read_data (a connection its client closed let go at once)",
    *HYPERCORN,
    without="such connections stay open 5 s, in CLOSE-WAIT",
)
SAY_CUT_MEND = Mend(
    "Hypercorn's TCPServer.run (a connection the stop cuts said in one line)",
    *HYPERCORN,
    without="each such connection logs an asyncio traceback at stop",
)
_read_until_eof = TCPServer._read_data


async def _read_then_let_go(self: TCPServer) -> None:
    await _read_until_eof(self)
    # The client is gone: no request can come on this connection any more.
    await self.idle_task.stop()


if applies(LET_GO_MEND):
    TCPServer._read_data = _read_then_let_go  # type: ignore[method-assign]

_run_connection = TCPServer.run


async def _run_or_say_cut(self: TCPServer) -> None:
    """Hypercorn's connection, ending quietly when the stop cuts it. At stop, Hypercorn
    cancels the connections still busy after its graceful timeout, and Python 3.11's
    asyncio streams log each cancelled one as an error with a 28-line traceback (its
    done-callback asks a cancelled task for its exception); one line says it instead."""
    try:
        await _run_connection(self)
    except asyncio.CancelledError:
        peer = self.writer.get_extra_info("peername")
        who = f"from {peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "on the unix socket"
        log.warning(
            "stopping: cut a connection %s still busy %.0f s after the stop began",
            who, self.config.graceful_timeout,
        )  # fmt: skip


if applies(SAY_CUT_MEND):
    TCPServer.run = _run_or_say_cut  # type: ignore[method-assign]
