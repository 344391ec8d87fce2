"""The same agent over every binding a client may use: JSON-RPC and HTTP+JSON, A2A 1.0 and 0.3."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import SendMessageRequest

from tests.a2a_helpers import A2A, HTTP_JSON, JSONRPC, state_name, texts, user_message

CARD = "/.well-known/agent-card.json"
BINDINGS = [(JSONRPC, "1.0"), (HTTP_JSON, "1.0"), (JSONRPC, "0.3"), (HTTP_JSON, "0.3")]


@pytest.mark.parametrize(("binding", "version"), BINDINGS)
async def test_send_get_and_stream_on_every_binding(a2a: A2A, binding: str, version: str) -> None:
    sent = await a2a.send("hello", binding=binding, version=version)
    assert state_name(sent.task.status.state) == "completed"
    got = await a2a.get(sent.task.id, binding=binding, version=version)
    assert got.id == sent.task.id
    assert texts(got.artifacts[-1]) == "echo: hello"
    streamed = await a2a.turn("think", binding=binding, version=version)
    assert streamed.final_state == "completed"
    assert streamed.artifacts("thinking")


@pytest.mark.parametrize(("binding", "version"), BINDINGS)
async def test_cancel_on_every_binding(a2a: A2A, binding: str, version: str) -> None:
    asked = await a2a.turn("ask", binding=binding, version=version)
    canceled = await a2a.cancel(asked.task_id, binding=binding, version=version)
    assert state_name(canceled.status.state) == "canceled"


@pytest.mark.parametrize("suffix", ["", "/"])
async def test_jsonrpc_answers_at_the_root_with_and_without_slash(a2a: A2A, suffix: str) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}},
    }
    async with a2a.http() as http:
        response = await http.post(a2a.url + suffix, json=body, headers={"A2A-Version": "1.0"})
    assert response.status_code == 200
    assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_jsonrpc_0_3_method_names(a2a: A2A) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message/send",
        "params": {
            "message": {
                "messageId": "m03",
                "role": "user",
                "kind": "message",
                "parts": [{"kind": "text", "text": "old client"}],
            }
        },
    }
    async with a2a.http() as http:
        sent = (await http.post(a2a.url, json=body)).json()["result"]
        assert sent["status"]["state"] == "completed"
        got = await http.post(
            a2a.url,
            json={"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": sent["id"]}},
        )
    assert got.json()["result"]["id"] == sent["id"]


async def test_the_0_3_extended_card_on_both_bindings(a2a: A2A) -> None:
    """A 0.3 client asks for it by its 0.3 names; the card says a bearer token works."""
    rpc = {"jsonrpc": "2.0", "id": 3, "method": "agent/getAuthenticatedExtendedCard"}
    async with a2a.http() as http:
        over_rpc = (await http.post(a2a.url, json=rpc)).json()
        over_rest = await http.get(a2a.url + "/v1/card")
    assert "error" not in over_rpc, over_rpc
    for card in (over_rpc["result"], over_rest.json()):
        assert card["supportsAuthenticatedExtendedCard"] is True
        assert card["securitySchemes"]["bearer"]["scheme"] == "Bearer"
        assert card["security"] == [{"bearer": ["caller"]}]
        assert "urn:tailagent:caller:v1" in json.dumps(card)
    assert over_rest.status_code == 200


async def test_both_card_variants_declare_the_bearer_scheme(a2a: A2A) -> None:
    async with a2a.http() as http:
        strict = (await http.get(a2a.url + CARD, headers={"A2A-Version": "1.0"})).json()
        legacy = (await http.get(a2a.url + CARD)).json()
    for card in (strict, legacy):
        scheme = card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]
        assert scheme["scheme"] == "Bearer" and "tailnet" in scheme["description"]
        assert card["securityRequirements"] == [{"schemes": {"bearer": {"list": ["caller"]}}}]
    assert "security" not in strict and legacy["security"] == [{"bearer": ["caller"]}]


async def test_http_json_responses_are_application_json(a2a: A2A) -> None:
    body = {"message": {"messageId": "r1", "role": "ROLE_USER", "parts": [{"text": "rest"}]}}
    async with a2a.http() as http:
        response = await http.post(
            a2a.url + "/message:send", json=body, headers={"A2A-Version": "1.0"}
        )
        missing = await http.get(a2a.url + "/tasks/nope", headers={"A2A-Version": "1.0"})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/json")


async def test_list_tasks_shows_tasks_of_a_context(a2a: A2A) -> None:
    first = await a2a.turn("one")
    await a2a.turn(user_message("two", context_id=first.context_id))
    listed = await a2a.list(context_id=first.context_id)
    assert len(listed) == 2
    assert {t.context_id for t in listed} == {first.context_id}


async def test_subscribe_to_a_working_task_sees_it_finish(a2a: A2A) -> None:
    async with a2a.client() as client:
        stream = client.send_message(SendMessageRequest(message=user_message("slow 2")))
        first = await anext(stream)
        watched = asyncio.create_task(a2a.subscribe(first.task.id))
        rest = [e async for e in stream]
    events = await asyncio.wait_for(watched, 10)
    assert events[0].HasField("task")
    assert state_name(rest[-1].status_update.status.state) == "completed"
    assert state_name(events[-1].status_update.status.state) == "completed"


async def test_follow_up_with_only_task_id_keeps_the_tasks_context(a2a: A2A) -> None:
    asked = await a2a.turn("question")
    done = await a2a.turn(user_message("red", task_id=asked.task_id))
    assert done.final_state == "completed"
    task = await a2a.get(asked.task_id)
    assert task.context_id == asked.context_id
    assert {m.context_id for m in task.history} == {asked.context_id}


async def test_a_message_id_reused_across_turns_stays_in_history(a2a: A2A) -> None:
    asked = await a2a.turn(user_message("question", message_id="same-id"))
    await a2a.turn(user_message("blue", task_id=asked.task_id, message_id="same-id"))
    task = await a2a.get(asked.task_id)
    user_texts = [texts(m) for m in task.history if m.role == 1]
    assert user_texts == ["question", "blue"]


async def test_jsonrpc_0_3_stream_and_resubscribe(a2a: A2A) -> None:
    message = {
        "messageId": "s03",
        "role": "user",
        "kind": "message",
        "parts": [{"kind": "text", "text": "slow 2"}],
    }
    send = {"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": {"message": message}}
    async with (
        a2a.http(timeout=20) as http,
        http.stream("POST", a2a.url, json=send) as stream,
    ):
        first = await first_data(stream)
        resubscribe = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tasks/resubscribe",
            "params": {"id": first["result"]["id"]},
        }
        async with http.stream("POST", a2a.url, json=resubscribe) as watch:
            events = [
                json.loads(line[5:])
                async for line in watch.aiter_lines()
                if line.startswith("data:")
            ]
    assert events[-1]["result"]["status"]["state"] == "completed"
    assert events[-1]["result"]["final"] is True


async def first_data(stream: httpx.Response) -> dict[str, Any]:
    async for line in stream.aiter_lines():
        if line.startswith("data:"):
            return json.loads(line[5:])
    raise AssertionError("the stream ended without an event")
