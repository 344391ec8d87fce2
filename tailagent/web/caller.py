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
from tailagent.cluster.carry import CARRY_STATE, Carry, carriable
from tailagent.store.sdk_stores import OwnerUser


def current_caller() -> Caller:
    caller = request.scope.get(SCOPE_KEY)
    if not isinstance(caller, Caller):  # the access layer lets nobody in without one
        raise RuntimeError("a desk route was reached without a verified caller")
    return caller


def call_context(caller: Caller, via: str = "web", carry: bool = False) -> ServerCallContext:
    """`carry`: a request for work another box runs is marked for carrying there
    (cluster/carry.py) rather than only refused, for a person it can be carried for."""
    state = {"caller": caller, VIA_KEY: via}
    if carry and carriable(caller):
        state[CARRY_STATE] = Carry()
    return ServerCallContext(user=OwnerUser(caller.owner), state=state)


def carried_home(context: ServerCallContext) -> str:
    """The home box a refused request was marked for, or ""."""
    carry = context.state.get(CARRY_STATE)
    return carry.home if isinstance(carry, Carry) else ""
