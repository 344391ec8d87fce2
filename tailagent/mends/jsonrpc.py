"""The JSON-RPC endpoint: a2a-sdk's dispatcher, with three hand-made changes.

a2a-sdk 1.3.0's 0.3 compatibility layer answers malformed params of a 0.3 method
(`message/send` with a string for `message`, `tasks/get` without `id`) with
-32600 Invalid Request and pydantic's full report. JSON-RPC 2.0 and A2A 0.3 say
-32602 Invalid params. Only that answer differs here; dispatch stays the SDK's.

A blocking SendMessage answers with its task, which the store has just rendered with
MessageToDict for the task's row and left in the call context (store/tasks.py's
ANSWER_KEY, named here by app.py): the answer takes that rendering while the task is
still equal to the one rendered, instead of rendering it again (~0.1 ms of a ~2.5 ms
turn). Anything else is rendered as the SDK renders it.

The access layer has parsed the body already, to check it and to log its method
(access/api_rules.py leaves the parse in the request's scope, under the key app.py names
here): the dispatcher's `request.json()` takes that parse instead of reading the body
again and parsing it a second time (~30 us of a quick send, in place). A body the
guard left unparsed (too large to log, not JSON, or empty) is the dispatcher's to
read, as before.

The correction takes the place of the dispatcher's private `_v03_adapter` and calls
the adapter's private `_generate_error_response`; the answer replaces the private
`_handle_send_message`; the parse is put where Starlette's `Request.json()` keeps its
own, the private `_json`. So all three are mends (mends/versions.py), for a2a-sdk 1.3.0
and Starlette 1.10.0 only: decided when this module is imported, with the server, so
the start can say which was left out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from a2a.server.context import ServerCallContext
from a2a.server.jsonrpc_models import InvalidParamsError
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.routes.common import ServerCallContextBuilder

# The adapter as the dispatcher's module has it: importing a2a.compat's module first
# runs into a2a-sdk 1.3.0's own import circle.
from a2a.server.routes.jsonrpc_dispatcher import JSONRPC03Adapter, JsonRpcDispatcher
from a2a.types.a2a_pb2 import SendMessageRequest, SendMessageResponse, Task
from google.protobuf.json_format import MessageToDict
from pydantic import BaseModel, ValidationError
from sse_starlette.sse import EventSourceResponse
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tailagent.mends.versions import Mend, applies

Endpoint = Callable[[Request], Awaitable[Response]]

PARAMS_MEND = Mend(
    what="a2a-sdk's 0.3 JSON-RPC adapter answering bad params -32602 (mends/jsonrpc.py)",
    dist="a2a-sdk",
    written_for=("1.3.0",),
    without="a 0.3 method's bad params are answered -32600 with pydantic's whole report",
)
PARAMS_MENDED = applies(PARAMS_MEND)
ANSWER_MEND = Mend(
    what="a2a-sdk's JSON-RPC SendMessage answer rendered once with the task's row "
    "(mends/jsonrpc.py)",
    dist="a2a-sdk",
    written_for=("1.3.0",),
    without="a blocking SendMessage's task is rendered twice, for its row and its answer",
)
ANSWER_MENDED = applies(ANSWER_MEND)
PARSED_MEND = Mend(
    what="Starlette's Request.json taking the access guard's parse of a JSON-RPC body "
    "(mends/jsonrpc.py)",
    dist="starlette",
    written_for=("1.10.0",),
    without="each JSON-RPC body is read and parsed twice, by the guard and the dispatcher",
)
PARSED_MENDED = applies(PARSED_MEND)


class _Dispatcher(JsonRpcDispatcher):
    """Answers SendMessage with the rendering left under `answer_key` in the call
    context as (the task rendered, its MessageToDict), while the task is still that."""

    answer_key = ""

    async def _handle_send_message(
        self, request_obj: SendMessageRequest, context: ServerCallContext
    ) -> dict[str, Any]:
        result = await self.request_handler.on_message_send(request_obj, context)
        answer = context.state.pop(self.answer_key, None)
        if isinstance(result, Task):
            if answer is not None and answer[0] == result:
                return {"task": answer[1]}
            return MessageToDict(SendMessageResponse(task=result))
        return MessageToDict(SendMessageResponse(message=result))


class _Params03Adapter(JSONRPC03Adapter):
    async def handle_request(
        self, request_id: str | int | None, method: str, body: dict[str, Any], request: Request
    ) -> JSONResponse | EventSourceResponse:
        try:
            model = cast("type[BaseModel]", self.METHOD_TO_MODEL[method])
            model.model_validate(body)
        except ValidationError as exc:
            where = ", ".join(".".join(str(p) for p in e["loc"]) for e in exc.errors()[:3])
            return self._generate_error_response(
                request_id, InvalidParamsError(message=f"Invalid params: {where}")
            )
        return await super().handle_request(request_id, method, body, request)


def taking_parsed(endpoint: Endpoint, parsed_key: str) -> Endpoint:
    """`endpoint`, its request's `json()` answered with the parse left in the scope under
    `parsed_key`: a non-empty object (an empty body is parsed as {} there, and must stay
    a parse error here)."""

    async def endpoint_taking_parsed(request: Request) -> Response:
        parsed = request.scope.get(parsed_key)
        if isinstance(parsed, dict) and parsed:
            request._json = parsed  # where Request.json() keeps what it parsed
        return await endpoint(request)

    return endpoint_taking_parsed


def jsonrpc_routes(
    handler: RequestHandler,
    path: str,
    context_builder: ServerCallContextBuilder,
    answer_key: str = "",
    parsed_key: str = "",
) -> list[Route]:
    """The endpoint; `answer_key`: where the store leaves a settled task's rendering
    in the call context (store/tasks.py's ANSWER_KEY), `parsed_key`: where the guard
    leaves its parse of the body in the scope (access/identity.py's RPC_KEY); "" for
    none."""
    if ANSWER_MENDED and answer_key:
        answering = _Dispatcher(handler, context_builder, enable_v0_3_compat=True)
        answering.answer_key = answer_key
        dispatcher: JsonRpcDispatcher = answering
    else:
        dispatcher = JsonRpcDispatcher(handler, context_builder, enable_v0_3_compat=True)
    if PARAMS_MENDED:
        dispatcher._v03_adapter = _Params03Adapter(handler, context_builder)
    endpoint: Endpoint = dispatcher.handle_requests
    if PARSED_MENDED and parsed_key:
        endpoint = taking_parsed(endpoint, parsed_key)
    return [Route(path, endpoint=endpoint, methods=["POST"])]
