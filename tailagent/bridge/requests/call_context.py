"""The ServerCallContext a2a-sdk hands the handler: the caller the access layer
verified, as the user its stores scope tasks by, and the request's parsed JSON-RPC body.

It stands at the bridge's edge, not in access/: the user it makes is the store's
(store/sdk_stores.py's OwnerUser), and access knows nothing of what is kept.
"""

from __future__ import annotations

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.routes.common import DefaultServerCallContextBuilder
from starlette.requests import Request

from tailagent.access.identity import RPC_KEY, SCOPE_KEY, Caller
from tailagent.cluster.carry import CARRY_STATE, SCOPE_CARRY
from tailagent.store.sdk_stores import OwnerUser


class CallerContextBuilder(DefaultServerCallContextBuilder):
    """Hands the verified Caller to a2a-sdk; a request without one cannot get here."""

    def build_user(self, request: Request) -> User:
        caller = request.scope.get(SCOPE_KEY)
        if not isinstance(caller, Caller):
            raise RuntimeError("request reached the A2A routes without a verified caller")
        return OwnerUser(caller.owner)

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state["caller"] = request.scope[SCOPE_KEY]
        context.state["rpc"] = request.scope.get(RPC_KEY)
        if (carry := request.scope.get(SCOPE_CARRY)) is not None:  # cluster/carry.py
            context.state[CARRY_STATE] = carry
        return context
