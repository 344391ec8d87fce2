"""The mends of dependencies' private internals (tailagent/mends/versions.py): each applies on
the version it was written for, which is the pinned one, and on any other is left out
whole, with one WARNING line at start that names the package, both versions and what
to do. Another version is made by answering importlib.metadata with it, in a fresh
interpreter, before tailagent is imported: the real code path decides."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest
from a2a.types import a2a_pb2
from a2a.utils import proto_utils
from google.protobuf.json_format import ParseDict
from google.protobuf.message import Message
from hypercorn.asyncio.tcp_server import TCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bench.bench_core import rpc
from tailagent.mends import acp_cancel, required_fields, sse_ids
from tailagent.mends import event_queues as sdk_queues
from tailagent.mends import hypercorn_connections as hypercorn_mends
from tailagent.mends import jsonrpc as jsonrpc
from tailagent.mends import sql_stores as sdk_sql
from tailagent.mends import tracing as sdk_tracing
from tailagent.mends import versions as mends
from tests.conftest import start_server

# In the order a start meets them: a2a-sdk's at import (SQL, queues) and before the
# server is imported (tracing), then the server's own imports: the JSON-RPC adapter
# (with the app), Hypercorn's (with listening/serving.py).
SDK_MENDS = [sdk_sql.SQL_MEND, sdk_queues.QUEUES_MEND, sdk_tracing.TRACING_MEND]
HYPERCORN_MENDS = [hypercorn_mends.LET_GO_MEND, hypercorn_mends.SAY_CUT_MEND]
JSONRPC_MENDS = [jsonrpc.PARAMS_MEND, jsonrpc.ANSWER_MEND]
APP_MENDS = [required_fields.REQUIRED_FIELDS_MEND, sse_ids.SSE_IDS_MEND, *JSONRPC_MENDS]
STARLETTE_MENDS = [jsonrpc.PARSED_MEND]
MENDS = [*SDK_MENDS, *APP_MENDS, *STARLETTE_MENDS, *HYPERCORN_MENDS]
ACP_MEND = acp_cancel.CANCEL_REQUEST_MEND
PINS = Path(__file__).resolve().parent.parent / "tailagent" / "binary" / "pins.txt"

# importlib.metadata answering with other versions of some distributions.
FAKE_VERSIONS = """
    import importlib.metadata as metadata
    FAKE = {fake!r}
    real_version = metadata.version
    metadata.version = lambda dist: FAKE.get(dist) or real_version(dist)
"""


def pinned(dist: str) -> str:
    lines = PINS.read_text().splitlines()
    return next(line.split("==")[1] for line in lines if line.startswith(f"{dist}=="))


def with_versions(fake: dict[str, str], code: str) -> str:
    """A fresh interpreter's output of `code`, run with `fake` installed versions."""
    program = textwrap.dedent(FAKE_VERSIONS.format(fake=fake)) + textwrap.dedent(code)
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("mend", [*MENDS, ACP_MEND], ids=lambda mend: mend.what.split(" (")[0])
def test_each_mend_is_written_for_the_pinned_version_installed_here(mend: mends.Mend) -> None:
    assert pinned(mend.dist) in mend.written_for
    assert mends.installed_version(mend.dist) in mend.written_for


def test_on_the_pinned_hypercorn_its_two_methods_are_the_mends() -> None:
    assert TCPServer._read_data is hypercorn_mends._read_then_let_go
    assert TCPServer.run is hypercorn_mends._run_or_say_cut
    assert mends.REFUSED == []


def test_on_the_pinned_a2a_sdk_its_json_rpc_answers_and_0_3_params_are_mended() -> None:
    routes = jsonrpc.jsonrpc_routes(None, "/", None, "tailagent.answer")  # type: ignore[arg-type]
    dispatcher = routes[0].endpoint.__self__  # type: ignore[attr-defined]
    assert type(dispatcher) is jsonrpc._Dispatcher
    assert dispatcher.answer_key == "tailagent.answer"
    assert type(dispatcher._v03_adapter) is jsonrpc._Params03Adapter


async def test_a_json_rpc_body_the_guard_parsed_is_not_read_again() -> None:
    async def json_of(request: Request) -> Response:
        return JSONResponse(await request.json())

    async def no_body() -> dict[str, object]:
        raise AssertionError("the body was read again")

    async def empty_body() -> dict[str, object]:
        return {"type": "http.request", "body": b"", "more_body": False}

    endpoint = jsonrpc.taking_parsed(json_of, "parsed")
    scope = {"type": "http", "method": "POST", "headers": [], "parsed": {"id": 1}}
    answered = await endpoint(Request(scope, no_body))
    assert json.loads(answered.body) == {"id": 1}
    scope["parsed"] = {}  # the guard's parse of an empty body: the dispatcher's to refuse
    with pytest.raises(json.JSONDecodeError):
        await endpoint(Request(scope, empty_body))
    routes = jsonrpc.jsonrpc_routes(None, "/", None, "", "parsed")  # type: ignore[arg-type]
    assert routes[0].endpoint.__qualname__ == "taking_parsed.<locals>.endpoint_taking_parsed"


def test_on_the_pinned_a2a_sdk_its_required_fields_walk_is_the_mend() -> None:
    assert proto_utils._validate_proto_required_fields_internal is required_fields.missing_required


def test_on_the_pinned_a2a_sdk_each_of_its_sse_writers_numbers_its_frames() -> None:
    """Each module that makes a2a-sdk's SSE answers holds the numbering maker (the
    frames themselves: tests/test_sse_ids.py)."""
    for name in sse_ids.WRITERS:
        made = getattr(importlib.import_module(name), sse_ids.MAKER)
        assert made.__qualname__ == "numbering.<locals>.create_event_source_response", name


def every_message_type() -> list[Message]:
    """One empty message of each type A2A defines, and some filled in part, down to
    maps and lists of messages that miss fields of their own."""
    empty = [getattr(a2a_pb2, name)() for name in sorted(a2a_pb2.DESCRIPTOR.message_types_by_name)]
    task = ParseDict(
        {
            "id": "t",
            "history": [{"role": "ROLE_USER"}, {"messageId": "m", "parts": [{}]}],
            "artifacts": [{"parts": []}, {"artifactId": "a", "parts": [{"text": "x"}]}],
            "metadata": {"deep": {"list": [1, {"x": None}]}},
        },
        a2a_pb2.Task(),
    )
    card = ParseDict(
        {
            "name": "n",
            "skills": [{"id": "s"}],
            "securitySchemes": {
                "key": {"apiKeySecurityScheme": {}},
                "oauth": {"oauth2SecurityScheme": {"flows": {"clientCredentials": {}}}},
            },
            "supportedInterfaces": [{"url": "http://x"}],
        },
        a2a_pb2.AgentCard(),
    )
    send = ParseDict(
        {"message": {"messageId": "m", "parts": [{"data": {}}]}}, a2a_pb2.SendMessageRequest()
    )
    return [*empty, task, card, send]


@pytest.mark.parametrize("message", every_message_type(), ids=lambda m: m.DESCRIPTOR.name)
def test_the_mended_walk_finds_what_the_sdk_walk_finds(
    message: Message, monkeypatch: pytest.MonkeyPatch
) -> None:
    mended = required_fields.missing_required(message)
    monkeypatch.setattr(
        proto_utils, "_validate_proto_required_fields_internal", required_fields.SDK_WALK
    )
    assert mended == required_fields.SDK_WALK(message)


def test_on_the_pinned_a2a_sdk_its_queues_sql_and_tracing_are_mended() -> None:
    if sys.version_info >= (3, 13):
        pytest.skip("3.13's own queues: the queue mend is not needed")
    out = with_versions(
        {},
        """
        import os, sys
        os.environ["OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"] = "false"  # as the server sets it
        import tailagent
        from tailagent.mends import versions as mends
        from tailagent.mends import event_queues as sdk_queues
        from tailagent.mends import sql_stores as sdk_sql
        from tailagent.mends import tracing as sdk_tracing
        print(sys.modules[sdk_queues.COMPAT_MODULE].__doc__ == sdk_queues.__doc__)
        print(all(sys.modules[name] is None for name in sdk_sql.DEFERRED))
        print(sdk_tracing.untraced_unless_enabled(), mends.REFUSED)
        """,
    )
    assert out.split("\n") == ["True", "True", "True []", ""]


def test_on_another_hypercorn_its_mends_are_refused_whole() -> None:
    out = with_versions(
        {"hypercorn": "0.19.0"},
        """
        from hypercorn.asyncio.tcp_server import TCPServer
        from tailagent.mends import versions as mends
        from tailagent.listening import serving
        from tailagent.mends import hypercorn_connections as hypercorn_mends
        print(TCPServer._read_data is hypercorn_mends._read_until_eof)
        print(TCPServer.run is hypercorn_mends._run_connection)
        print(*mends.REFUSED, sep="\\n")
        """,
    )
    lines = out.splitlines()
    assert lines[:2] == ["True", "True"]
    assert len(lines) == 4, out
    for line, mend in zip(lines[2:], HYPERCORN_MENDS, strict=True):
        assert line.startswith(f"mend left out: {mend.what} is written for hypercorn 0.18.0, ")
        assert "0.19.0 is installed" in line and "install hypercorn==0.18.0, as" in line


def test_on_another_a2a_sdk_its_queues_sql_and_tracing_are_left_as_the_sdk_has_them() -> None:
    out = with_versions(
        {"a2a-sdk": "1.4.0"},
        """
        import os, sys
        os.environ["OTEL_INSTRUMENTATION_A2A_SDK_ENABLED"] = "false"
        import tailagent
        from tailagent.mends import versions as mends
        from tailagent.mends import event_queues as sdk_queues
        from tailagent.mends import sql_stores as sdk_sql
        from tailagent.mends import tracing as sdk_tracing
        print(sdk_queues.COMPAT_MODULE in sys.modules)
        print(any(name in sys.modules for name in sdk_sql.DEFERRED))
        print(sdk_tracing.untraced_unless_enabled())
        import tailagent.server
        from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
        print(JsonRpcDispatcher._handle_send_message.__code__.co_qualname)
        from tailagent.mends import jsonrpc as jsonrpc
        routes = jsonrpc.jsonrpc_routes(None, "/", None, "tailagent.answer")
        print(type(routes[0].endpoint.__self__).__name__)
        print(type(routes[0].endpoint.__self__._v03_adapter).__name__)
        from a2a.utils import proto_utils
        print(proto_utils._validate_proto_required_fields_internal.__module__)
        print("culsans" in sys.modules, "sqlalchemy" in sys.modules)
        print(*mends.REFUSED, sep="\\n")
        """,
    )
    lines = out.splitlines()
    assert lines[:8] == [
        "False",
        "False",
        "False",
        "trace_function.<locals>.async_wrapper",
        "JsonRpcDispatcher",
        "JSONRPC03Adapter",
        "a2a.utils.proto_utils",
        "True True",
    ]
    refused = lines[8:]
    assert [line.split(" is written for ")[0] for line in refused] == [
        f"mend left out: {mend.what}" for mend in [*SDK_MENDS, *APP_MENDS]
    ]
    assert all("a2a-sdk 1.3.0, and 1.4.0 is installed" in line for line in refused)


def test_a_start_on_other_versions_says_each_mend_left_out_and_serves(tmp_path: Path) -> None:
    others = {"hypercorn": "0.19.0", "a2a-sdk": "1.4.0", "starlette": "1.11.0"}
    fake = textwrap.dedent(FAKE_VERSIONS.format(fake=others))
    start = fake + "from tailagent.cli import run\nrun()\n"
    server = start_server(tmp_path, program=("-c", start), env=dict(os.environ))
    try:
        headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {server.token}"}
        reply = httpx.post(server.url, json=rpc("SendMessage", "hello"), headers=headers)
        state = reply.json()["result"]["task"]["status"]["state"]
        assert state == "TASK_STATE_COMPLETED", json.dumps(reply.json())[:300]
    finally:
        assert server.stop() == 0, server.log()
    log = server.log()
    said = re.findall(r"WARNING tailagent: mend left out: (.*?) is written for", log)
    assert said == [mend.what for mend in MENDS], log
    assert log.index("mend left out") < log.index("serving on"), log


def test_on_another_acp_its_cancel_request_is_not_sent_and_the_start_says_so() -> None:
    out = with_versions(
        {"agent-client-protocol": "0.13.0"},
        """
        import logging, sys
        logging.basicConfig(stream=sys.stdout, format="%(levelname)s %(message)s")
        from tailagent.mends import versions as mends
        from tailagent.agents.acp import process
        from tailagent.mends import acp_cancel
        print(acp_cancel.SENDS_RAW_NOTIFICATIONS)
        mends.say_refused(logging.getLogger("tailagent"))
        mends.say_refused(logging.getLogger("tailagent"))  # each line is said once
        """,
    )
    sent, *said = out.splitlines()
    assert sent == "False"
    assert len(said) == 1, out
    assert said[0].startswith(f"WARNING mend left out: {ACP_MEND.what} is written for ")
    assert "agent-client-protocol 0.12.1, and 0.13.0 is installed" in said[0]
