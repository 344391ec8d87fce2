"""A request for work another box runs, carried there for the person who sent it.

Boxes that share a store (and, usually, one Tailscale Service name) each run their
own turns: a task's events, its agent process and its conversation's worktree live
on the box that ran it. A follow-up, a subscription, a diff or a merge that reaches
another box is carried to that one, the home box, rather than refused:

- the bridge, which alone knows where a task or conversation runs, marks the request
  (`carry_to`) where it used to refuse it as running elsewhere;
- `CarryToHome`, the innermost layer of the API, then drops that refusal unsent and
  sends the same request (method, path, body, the headers that mean something to A2A)
  to the home box over the tailnet, with one hop of the actor chain (delegation/
  chain.py) signed by this node for the person whois named here;
- the home box takes the hop from a node of `delegation.siblings` as the person calling
  it directly, applies its own policy, and answers; the answer, a stream included,
  goes back to the caller as it comes. The caller sees one server.

Only a person's request is carried (a tailnet login whois named): a token is one box's,
a tagged node is no person a hop can name, and a request carried here already is never
carried on (no loops between two stores' views). When the home box cannot be reached
the caller gets the refusal this box would have sent, naming the home box.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from tailagent.access.asgi import ASGI, headers_of, outcome_of, replay
from tailagent.access.identity import SCOPE_KEY, Caller
from tailagent.delegation.chain import CHAIN_HEADER
from tailagent.delegation.outbound import DelegationFailed, HopSigner, TurnIdentity

log = logging.getLogger("tailagent.cluster")

CARRY_STATE = "carry"  # the key of a request's Carry in its ServerCallContext's state
SCOPE_CARRY = "tailagent.carry"  # and in its ASGI scope
# What a carried request keeps of its caller's headers: what A2A and a stream's resumption
# read. Not the Host (the home box's own), nor a token or cookie (this box's), nor
# X-Forwarded-For (the home box learns the caller from the hop, never from headers).
KEPT_HEADERS = (
    b"content-type",
    b"accept",
    b"a2a-version",
    b"a2a-extensions",
    b"last-event-id",
    b"user-agent",
)
# Hop-by-hop, or the home box's own framing: not passed back to the caller.
DROPPED_ANSWER_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length"}
CONNECT_TIMEOUT = 5.0
# What a proxy on the way answers for a box it cannot reach (tailscaled's outbound proxy,
# the home box's `tailscale serve`: 502, 504, or a plain-text 404 for a name it serves
# nothing on); tailagent itself answers A2A with JSON or an event stream, and never those.
UNREACHED = (502, 504)
A2A_ANSWER_TYPES = ("application/json", "text/event-stream")


@dataclass
class Carry:
    """A request the bridge found to be another box's: where that box is."""

    home: str = ""


def carry_to(state: MutableMapping[str, Any], home: str) -> bool:
    """Marks the request as one for the box at `home`; False when it cannot be carried
    (not a person's, carried here already, or no box to carry it to)."""
    carry = state.get(CARRY_STATE)
    if not isinstance(carry, Carry) or not home.startswith(("http://", "https://")):
        return False
    carry.home = home.rstrip("/")
    return True


def may_carry(state: MutableMapping[str, Any]) -> bool:
    """Whether the request could be carried, if it named another box's work."""
    return isinstance(state.get(CARRY_STATE), Carry)


def carriable(caller: object) -> bool:
    """A person whois named, calling this box directly."""
    return (
        isinstance(caller, Caller)
        and caller.kind == "user"
        and not caller.delegated_by
        and not caller.carried_by
        and bool(caller.node)
    )


class Carrier:
    """Sends a request to its home box and the answer back: one per server."""

    def __init__(self, signer: HopSigner, proxy: str | None) -> None:
        self._signer = signer
        timeout = httpx.Timeout(CONNECT_TIMEOUT, read=None)  # a stream may idle for long
        self._http = httpx.AsyncClient(proxy=proxy, timeout=timeout, follow_redirects=False)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _request(
        self, scope: dict[str, Any], body: bytes, home: str, caller: Caller
    ) -> httpx.Request:
        audience = urlsplit(home).hostname or ""
        person = TurnIdentity("", "", caller.owner, caller.login, caller.node)
        chain = await self._signer.chain(person, audience, caller.login, caller.node)
        headers = {name.decode(): value for name, value in headers_of(scope).items()
                   if name in KEPT_HEADERS}  # fmt: skip
        headers[CHAIN_HEADER] = ",".join(chain)
        query = scope.get("query_string", b"").decode("latin-1")
        url = home + scope.get("raw_path", scope["path"].encode()).decode("latin-1")
        return self._http.build_request(
            scope["method"], url + (f"?{query}" if query else ""), headers=headers, content=body
        )

    async def _open(
        self, scope: dict[str, Any], body: bytes, home: str, caller: Caller
    ) -> httpx.Response | None:
        """The home box's answer, its body still to read; None (and why, logged) when
        the home box could not be asked or a proxy on the way answered for it."""
        what = f"{scope['method']} {scope['path']}"
        try:
            request = await self._request(scope, body, home, caller)
            answer = await self._http.send(request, stream=True)
        except (httpx.HTTPError, DelegationFailed) as exc:
            log.warning("could not carry %s to %s: %s", what, home, exc)
            return None
        if not _from_tailagent(answer):
            await answer.aclose()
            log.warning("could not carry %s to %s: the tailnet answered %d (is it down?)",
                        what, home, answer.status_code)  # fmt: skip
            return None
        return answer

    async def call(
        self, home: str, caller: Caller, method: str, params: dict[str, Any]
    ) -> dict[str, Any] | None:
        """One JSON-RPC call made on `home` for `caller` (a person's answer from this
        box's desk): its answer, or None when the home box could not be asked."""
        scope = {"type": "http", "method": "POST", "path": "/", "query_string": b"",
                 "headers": [(b"content-type", b"application/json"),
                             (b"a2a-version", b"1.0")]}  # fmt: skip
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        answer = await self._open(scope, body.encode(), home, caller)
        if answer is None:
            return None
        try:
            found: dict[str, Any] = json.loads(await answer.aread())
        finally:
            await answer.aclose()
        return found

    async def relay(
        self, scope: dict[str, Any], body: bytes, home: str, receive: Any, send: Any
    ) -> bool:
        """Sends the request to `home` and its answer to `send`; False (nothing sent)
        when the home box could not be asked."""
        answer = await self._open(scope, body, home, scope[SCOPE_KEY])
        if answer is None:
            return False
        outcome = outcome_of(scope)
        outcome.what = f"{outcome.what} carried to {urlsplit(home).hostname}".strip()
        try:
            await _pass_back(answer, receive, send)
        finally:
            await answer.aclose()
        return True


def _from_tailagent(answer: httpx.Response) -> bool:
    """Whether the answer is the home box's own, not a proxy's on the way."""
    media = answer.headers.get("content-type", "").split(";")[0].strip().lower()
    return answer.status_code not in UNREACHED and media in A2A_ANSWER_TYPES


async def _pass_back(answer: httpx.Response, receive: Any, send: Any) -> None:
    """The home box's answer to the caller as it comes, until it ends or the caller
    goes (a stream the caller closed is closed at the home box too)."""
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers.items()
               if k.lower() not in DROPPED_ANSWER_HEADERS]  # fmt: skip
    await send({"type": "http.response.start", "status": answer.status_code, "headers": headers})

    async def pump() -> None:
        async for chunk in answer.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    pumping = asyncio.create_task(pump())
    watching = asyncio.create_task(gone())
    try:
        await asyncio.wait((pumping, watching), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (pumping, watching):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if pumping.done() and not pumping.cancelled() and (error := pumping.exception()):
        log.warning("a carried answer broke off: %s", error)


class CarryToHome:
    """The API's innermost layer: a request the bridge marks as another box's goes
    there (see the module's docstring); every other request passes untouched."""

    def __init__(self, app: ASGI, carrier: Carrier | None) -> None:
        self._app = app
        self._carrier = carrier

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self._carrier is None or scope["type"] != "http" or not carriable(scope.get(SCOPE_KEY)):
            await self._app(scope, receive, send)
            return
        body = await _whole_body(receive)
        carry = scope[SCOPE_CARRY] = Carry()
        held: list[dict[str, Any]] = []
        passing = False

        async def hold_if_carried(message: dict[str, Any]) -> None:
            nonlocal passing
            if carry.home and not passing:
                held.append(message)  # this box's refusal: sent only if the carry fails
                return
            passing = True
            await send(message)

        await self._app(scope, replay(body, receive), hold_if_carried)
        if not held:
            return
        if not await self._carrier.relay(scope, body, carry.home, receive, send):
            for message in held:
                await send(message)


async def _whole_body(receive: Any) -> bytes:
    """The request's body (BodyLimit has bounded and buffered it already)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)
