"""Bad input gets a clear error, never a stack trace, and the next request is served."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from a2a.types.a2a_pb2 import TaskState

from tests.a2a_helpers import A2A, user_message

V1 = {"A2A-Version": "1.0"}


def rpc(method: str, params: object, id_: object = 1) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


async def post(a2a: A2A, url: str, content: bytes | str, headers: dict[str, str]) -> httpx.Response:
    async with a2a.http() as http:
        return await http.post(url, content=content, headers=headers)


async def still_serving(a2a: A2A) -> None:
    sent = await a2a.send("still here?")
    assert sent.task.status.state == TaskState.TASK_STATE_COMPLETED


def assert_no_trace(response: httpx.Response) -> None:
    assert "Traceback" not in response.text
    assert 'File "' not in response.text


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (b"{not json", -32700),
        (json.dumps(rpc("NoSuchMethod", {})).encode(), -32601),
        (json.dumps(rpc("SendMessage", {"message": "not an object"})).encode(), -32602),
        (json.dumps(rpc("SendMessage", {})).encode(), -32602),
        (json.dumps(rpc("GetTask", {"id": "no-such-task"})).encode(), -32001),
        (json.dumps(rpc("CancelTask", {"id": "no-such-task"})).encode(), -32001),
        (json.dumps([rpc("GetTask", {"id": "x"})]).encode(), -32600),
    ],
)
async def test_jsonrpc_errors(a2a: A2A, body: bytes, code: int) -> None:
    response = await post(a2a, a2a.url, body, {"Content-Type": "application/json", **V1})
    assert response.json()["error"]["code"] == code
    assert_no_trace(response)
    await still_serving(a2a)


async def test_wrong_content_type_is_415(a2a: A2A) -> None:
    body = str(rpc("GetTask", {"id": "x"}))  # not even JSON, as the TCK sends it
    response = await post(a2a, a2a.url, body, {"Content-Type": "text/plain", **V1})
    assert response.status_code == 415
    assert response.json()["error"]["code"] == -32005
    rest = await post(a2a, a2a.url + "/message:send", "{}", {"Content-Type": "text/plain", **V1})
    assert rest.status_code == 415
    assert rest.json()["error"]["status"] == "CONTENT_TYPE_NOT_SUPPORTED"


async def test_body_over_the_limit_is_413(a2a: A2A) -> None:
    big = json.dumps(rpc("SendMessage", {"message": {"parts": [{"text": "x" * 5_000_000}]}}))
    response = await post(a2a, a2a.url, big, {"Content-Type": "application/json", **V1})
    assert response.status_code == 413
    assert "too large" in response.json()["error"]["message"]
    await still_serving(a2a)


async def test_chunked_body_over_the_limit_is_413(a2a: A2A) -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        for _ in range(50):
            yield b"x" * 100_000

    async with a2a.http() as http:
        response = await http.post(
            a2a.url, content=chunks(), headers={"Content-Type": "application/json", **V1}
        )
    assert response.status_code == 413
    await still_serving(a2a)


async def test_unsupported_version_header(a2a: A2A) -> None:
    body = json.dumps(rpc("GetTask", {"id": "x"}))
    response = await post(
        a2a, a2a.url, body, {"Content-Type": "application/json", "A2A-Version": "99.0"}
    )
    assert response.json()["error"]["code"] == -32009


async def test_a_dropped_stream_client_leaves_the_task_true(a2a: A2A) -> None:
    body = rpc(
        "SendStreamingMessage",
        {"message": {"messageId": "drop", "role": "ROLE_USER", "parts": [{"text": "slow 2"}]}},
    )
    task_id = None
    async with (
        a2a.http(timeout=10) as http,
        http.stream("POST", a2a.url, json=body, headers=V1) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                task_id = json.loads(line[5:])["result"]["task"]["id"]
                break
    assert task_id
    await still_serving(a2a)
    for _ in range(50):
        task = await a2a.get(task_id)
        if task.status.state == TaskState.TASK_STATE_COMPLETED:
            break
        await asyncio.sleep(0.1)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED  # ran to the end, unheard


async def test_unknown_route_and_method(a2a: A2A) -> None:
    async with a2a.http() as http:
        assert (await http.get(a2a.url + "/no/such/path")).status_code == 404
        assert (await http.get(a2a.url + "/")).status_code == 405
    await still_serving(a2a)


@pytest.mark.parametrize(
    "body",
    [
        rpc("message/send", {"message": "not an object"}),
        rpc("tasks/get", {}),
        rpc("tasks/cancel", {"id": 5}),
    ],
)
async def test_jsonrpc_0_3_bad_params_are_32602(a2a: A2A, body: dict[str, object]) -> None:
    response = await post(a2a, a2a.url, json.dumps(body), {"Content-Type": "application/json"})
    error = response.json()["error"]
    assert error["code"] == -32602
    assert "pydantic" not in response.text
    await still_serving(a2a)


@pytest.mark.parametrize("method", ["SendMessage", "SendStreamingMessage"])
async def test_a_message_missing_required_fields_is_32602_naming_each(
    a2a: A2A, method: str
) -> None:
    """a2a-sdk's check of REQUIRED fields (mends/required_fields.py reads each type once)
    still finds every one missing, nested names and all, and nothing is run."""
    message = {"parts": [], "metadata": {"deep": {"list": [1, {"x": None}]}}}
    body = json.dumps(rpc(method, {"message": message})).encode()
    response = await post(a2a, a2a.url, body, {"Content-Type": "application/json", **V1})
    error = response.json()["error"]
    assert error["code"] == -32602
    violations = next(d for d in error["data"] if d["@type"].endswith("BadRequest"))
    assert violations["fieldViolations"] == [
        {"field": "message.message_id", "description": "Field is required."},
        {"field": "message.role", "description": "Field is required."},
        {"field": "message.parts", "description": "Field must contain at least one element."},
    ]
    assert_no_trace(response)
    await still_serving(a2a)


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
async def test_a_number_json_has_not_is_refused_as_no_json_and_nothing_runs(
    a2a: A2A, number: str
) -> None:
    """Python's JSON reader takes NaN and the infinities, JSON has neither (RFC 8259),
    and a task holding one could be neither answered nor stored: -32603, the task lost.
    The words as text are only text."""
    before = len(await a2a.list())
    message = {"messageId": number, "role": "ROLE_USER", "parts": [{"text": f"{number}?"}]}
    as_text = json.dumps({**message, "metadata": {"x": "THE NUMBER"}})
    body = as_text.replace('"THE NUMBER"', number)
    jsonrpc = (
        f'{{"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {{"message": {body}}}}}'
    )
    headers = {"Content-Type": "application/json", **V1}
    response = await post(a2a, a2a.url, jsonrpc, headers)
    error = response.json()["error"]
    assert error["code"] == -32700
    assert error["message"] == f"the body is not JSON: {number} is not a number JSON has (RFC 8259)"
    rest = await post(a2a, a2a.url + "/message:send", f'{{"message": {body}}}', headers)
    assert rest.status_code == 400
    assert rest.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert number in rest.json()["error"]["message"]
    assert len(await a2a.list()) == before
    sent = await a2a.send(user_message(f"{number} as text"))
    assert sent.task.status.state == TaskState.TASK_STATE_COMPLETED
