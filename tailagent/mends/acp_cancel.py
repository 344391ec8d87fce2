"""ACP's `$/cancel_request`, sent through the acp library's private connection.

When tailagent gives up on a request to an ACP agent (agents/acp/process.py,
`AgentProcess.bounded`), it says so with `$/cancel_request`, so the agent stops working
on an answer nobody waits for. acp 0.12.1 has no call for `$/` notifications: its
connection's private JSON-RPC side (`connection._conn.send_notification`) sends it as
is. That side is read for 0.12.1 only: on another version tailagent does not reach into
it (the request is given up without the notification) rather than guess, and the start
says so (mends/versions.py).
"""

from __future__ import annotations

from acp.core import ClientSideConnection

from tailagent.mends.versions import Mend, applies

CANCEL_REQUEST = "$/cancel_request"
CANCEL_REQUEST_MEND = Mend(
    what="ACP's $/cancel_request sent through acp's private connection (mends/acp_cancel.py)",
    dist="agent-client-protocol",
    written_for=("0.12.1",),
    without="a session/close or session/resume given up on is not cancelled at the agent",
)
SENDS_RAW_NOTIFICATIONS = applies(CANCEL_REQUEST_MEND)


async def send_cancel_request(connection: ClientSideConnection, request_id: int | str) -> None:
    """Tells the agent that the request `request_id` is given up on; on another acp than
    the one this is written for, nothing is sent."""
    if SENDS_RAW_NOTIFICATIONS:
        await connection._conn.send_notification(CANCEL_REQUEST, {"requestId": request_id})
