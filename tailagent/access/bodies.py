"""A request's body, as the access layer takes it: only from a caller it let in,
within a size and a deadline, and with a shape a2a-sdk can parse without stalling.

a2a-sdk turns a JSON body into protobuf messages in pure Python, on the one event
loop every caller shares, in time proportional to the body's values: 200,000 parts
(3 MB) held the loop for 17 s, `/healthz` included; a data part 40 levels deep broke
its protobuf types (an internal error), and a body nested 20,000 deep raised a
RecursionError. So its depth, parts and values are bounded here before the SDK sees
it: told from its bytes where they suffice, else from one parse by the C decoder.

Hypercorn bounds a request's head (a connection that has not sent a whole request
within its keep-alive timeout, 5 s, is closed), but nothing bounds a body: a client
sending a byte every 20 s kept its connection, and the handler waiting on it,
forever. Hypercorn's own `read_timeout` would also cut every quiet stream a client
is reading (server-sent events), so the deadline is kept here, for the body alone.

`BodyLimit` reads every body so, on the desk's routes and the API's; the shape is
asked of A2A's bodies only (api_rules.py's `A2ABodies`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import Any

from hypercorn.typing import ASGIReceiveEvent

from tailagent.access.asgi import ASGI, headers_of, replay
from tailagent.access.identity import SCOPE_KEY, Caller
from tailagent.access.refusals import DISCARD_LIMIT, INVALID_REQUEST, discard, refuse

PARSE_ERROR = -32700  # JSON-RPC's code for a body that is not JSON


@dataclass(frozen=True, slots=True)
class BodyLimits:
    max_bytes: int
    timeout: float  # seconds for the whole body to arrive
    max_depth: int  # nesting of JSON arrays and objects
    max_parts: int  # parts in all of a request's `parts` lists
    max_values: int  # members of all its arrays and objects


@dataclass(frozen=True, slots=True)
class BodyRefused:
    """Why a body was not taken; `message` is what the caller reads."""

    status: int
    reason: str  # the refusal's name: the metrics label, and AIP-193's ErrorInfo reason
    message: str
    rpc_code: int = INVALID_REQUEST  # its JSON-RPC error code


async def read_body(receive: Any, declared: str, limits: BodyLimits) -> bytes | BodyRefused:
    """The whole body, or why not: over the size limit (413, with or without a
    Content-Length), not all there within the deadline (408), or cut short."""
    deadline = asyncio.get_running_loop().time() + limits.timeout
    length = int(declared) if declared.isdigit() else None
    too_long = length is not None and length > limits.max_bytes
    got = _too_large(limits) if too_long else await _collect_by(deadline, receive, limits)
    if isinstance(got, BodyRefused) and got.status == 413 and (length or 0) <= DISCARD_LIMIT:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                await discard(receive, DISCARD_LIMIT)
    return got


async def _collect_by(deadline: float, receive: Any, limits: BodyLimits) -> bytes | BodyRefused:
    """The body, if it is all there by `deadline` (the loop's clock)."""
    try:
        async with asyncio.timeout_at(deadline):
            return await _collect(receive, limits)
    except TimeoutError:
        return BodyRefused(
            408, "REQUEST_TIMEOUT", "the request body did not arrive within "
            f"{limits.timeout:g} s (body_timeout)",
        )  # fmt: skip


def _too_large(limits: BodyLimits) -> BodyRefused:
    return BodyRefused(
        413, "PAYLOAD_TOO_LARGE", f"Request body too large (limit {limits.max_bytes} bytes)"
    )


async def _collect(receive: Any, limits: BodyLimits) -> bytes | BodyRefused:
    """The body; nothing more is kept once it is over the limit."""
    body = bytearray()
    while True:
        message: ASGIReceiveEvent = await receive()
        if message["type"] != "http.request":
            return BodyRefused(400, "INCOMPLETE_BODY", "the client left before its body ended")
        body += message.get("body", b"")
        if len(body) > limits.max_bytes:
            return _too_large(limits)
        if not message.get("more_body"):
            return bytes(body)


def shape_refused(body: bytes, limits: BodyLimits) -> BodyRefused | None:
    """Why the body's JSON shape is more than the SDK should parse, if it is. Parsed
    here only when its bytes leave it in doubt (almost never); a body that is not JSON
    passes, for the binding's own parse error to answer."""
    if plainly_within(body, limits):
        return None
    refused = skeleton_refusal(body, limits)
    if refused is not None:
        return refused
    try:
        value = json.loads(body)
    except RecursionError:
        return _too_deep(limits)
    except ValueError:
        return None
    return shape_refusal(value, limits)


class _NoJsonNumber(Exception):
    """A number Python's JSON reader takes and JSON has not (its word is str())."""


def _no_json_number(word: str) -> Any:
    raise _NoJsonNumber(word)


def number_refused(body: bytes) -> BodyRefused | None:
    """Why a body Python reads as JSON is not: it holds NaN or an infinity as a number
    (RFC 8259 has neither). a2a-sdk would carry one into a task's metadata, where
    nothing can write it out again: the answer and the task's row both failed (-32603,
    the task lost). The same words inside strings are text, and pass; a body that is
    not JSON at all is left for the binding's own parse error."""
    if b"NaN" not in body and b"Infinity" not in body:
        return None
    try:
        json.loads(body, parse_constant=_no_json_number)
    except _NoJsonNumber as exc:
        message = f"the body is not JSON: {exc} is not a number JSON has (RFC 8259)"
        return BodyRefused(400, "NOT_JSON", message, rpc_code=PARSE_ERROR)
    except (ValueError, RecursionError):
        return None
    return None


def plainly_within(body: bytes, limits: BodyLimits) -> bool:
    """Whether the body's bytes alone show it within every bound, as almost every
    request is (a microsecond, against the walk's ten): nesting is at most its count
    of opening brackets, and every member of a container but its first follows a
    comma. Brackets and commas inside strings only make the count larger."""
    containers = body.count(b"{") + body.count(b"[")
    members = containers + body.count(b",")
    return containers <= limits.max_depth and members <= min(limits.max_values, limits.max_parts)


def skeleton_refusal(body: bytes, limits: BodyLimits) -> BodyRefused | None:
    """Too deep or too many values, told from the bytes before the C decoder runs: its
    time grows with what it builds (1.8 million nested lists, 3.6 MB, took it 1.2 s).
    Without its escaped quotes the body's quotes delimit its strings, each a member, a
    member's key or the whole body. Outside them each comma begins a member, and every
    container but the outermost is one; and a body's containers lie on at most one
    path per comma, and one more, from the outermost down, so many containers and few
    commas are a deep body."""
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    if unescaped.count(b'"') // 2 > 2 * limits.max_values + 1:
        return _too_many_values(limits)
    outside = b"".join(unescaped.split(b'"')[::2])
    containers = outside.count(b"{") + outside.count(b"[")
    commas = outside.count(b",")
    if containers > limits.max_depth * (commas + 1):
        return _too_deep(limits)
    if max(commas, containers - 1) > limits.max_values:
        return _too_many_values(limits)
    return None


def _too_many_values(limits: BodyLimits) -> BodyRefused:
    return BodyRefused(
        400, "TOO_MANY_VALUES", f"the JSON body holds more than {limits.max_values} values "
        "(max_json_values)",
    )  # fmt: skip


def _too_deep(limits: BodyLimits) -> BodyRefused:
    return BodyRefused(
        400, "TOO_DEEP", f"the JSON body is nested deeper than {limits.max_depth} levels "
        "(max_json_depth)",
    )  # fmt: skip


def shape_refusal(value: Any, limits: BodyLimits) -> BodyRefused | None:
    """Why a parsed body is more than the SDK should parse, or None. Each container's
    size is counted before its members are looked at, so a refused body costs no more
    than its first too-large container."""
    values = parts = 0
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        if depth > limits.max_depth:
            return _too_deep(limits)
        members = list(item.values()) if isinstance(item, dict) else item
        values += len(members)
        if values > limits.max_values:
            return _too_many_values(limits)
        found = item.get("parts") if isinstance(item, dict) else None
        parts += len(found) if isinstance(found, list) else 0
        if parts > limits.max_parts:
            return BodyRefused(
                400, "TOO_MANY_PARTS", f"the message has more than {limits.max_parts} parts "
                "(max_parts)",
            )  # fmt: skip
        stack += [(m, depth + 1) for m in members if isinstance(m, (dict, list))]
    return None


class BodyLimit:
    """Reads the body of a request the guard let in (a caller in its scope) within
    `limits`' size and deadline, before anything behind it runs, and hands it on whole.
    A public route's body is its route's to read, as a refused request's is nobody's."""

    def __init__(self, app: ASGI, *, limits: BodyLimits) -> None:
        self._app = app
        self._limits = limits

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in ("POST", "PUT", "PATCH")
            or not isinstance(scope.get(SCOPE_KEY), Caller)
        ):
            await self._app(scope, receive, send)
            return
        declared = headers_of(scope).get(b"content-length", "")
        body = await read_body(receive, declared, self._limits)
        if isinstance(body, BodyRefused):
            status, reason, message = body.status, body.reason, body.message
            await refuse(scope, receive, send, status, reason, body.rpc_code, message)
            return
        await self._app(scope, replay(body, receive), send)
