"""Who a desk request comes from, and the A2A call context that acts as them.

The access layer puts the verified Caller in the request's scope before any desk route
runs; every route reads it here, and hands the A2A handler a context naming the same
caller and the channel the audit log records ("web" for the pages, "notification"
for an answer from a notification's button).
"""

from __future__ import annotations

from a2a.server.context import ServerCallContext
from quart import request

from tailagent.access.identity import SCOPE_KEY, Caller
from tailagent.bridge.answers.requester import VIA_KEY
from tailagent.store.sdk_stores import OwnerUser


def current_caller() -> Caller:
    caller = request.scope.get(SCOPE_KEY)
    if not isinstance(caller, Caller):  # the access layer lets nobody in without one
        raise RuntimeError("a desk route was reached without a verified caller")
    return caller


def call_context(caller: Caller, via: str = "web") -> ServerCallContext:
    return ServerCallContext(user=OwnerUser(caller.owner), state={"caller": caller, VIA_KEY: via})
