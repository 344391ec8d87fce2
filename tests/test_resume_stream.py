"""A stream cut mid-turn and taken up again with its last number (issue 46): every
event it missed, in order, each once, then the live ones, through a real server.

The echo agent's `slow N` says a tick a second; the test reads the streamed turn's
first events over JSON-RPC, drops the connection, and subscribes again with
`Last-Event-ID`, as a phone that slept or a laptop that lost its Wi-Fi would.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx

from tests.conftest import RunningServer, start_server


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def message(text: str) -> dict[str, Any]:
    return {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                        "parts": [{"text": text}]}}  # fmt: skip


def events(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The StreamResponses of an SSE answer, as JSON."""
    for line in response.iter_lines():
        if line.startswith("data:"):
            body = json.loads(line.removeprefix("data:"))
            assert "result" in body, body
            yield body["result"]


def number(event: dict[str, Any]) -> int | None:
    update = event.get("statusUpdate") or event.get("artifactUpdate")
    return None if update is None else update.get("metadata", {}).get("sequence")


def state(event: dict[str, Any]) -> str | None:
    return event.get("statusUpdate", {}).get("status", {}).get("state")


def text(event: dict[str, Any]) -> str:
    update = event.get("artifactUpdate") or {}
    return "".join(p.get("text", "") for p in update.get("artifact", {}).get("parts", []))


def headers(server: RunningServer, **more: str) -> dict[str, str]:
    return {"A2A-Version": "1.0", "Authorization": f"Bearer {server.token}", **more}


def streamed(
    http: httpx.Client, server: RunningServer, text: str
) -> tuple[list[dict[str, Any]], list[int]]:
    """A streamed turn read to its end: its events, and the numbers they carry."""
    body = rpc("SendStreamingMessage", message(text))
    with http.stream("POST", "/", json=body, headers=headers(server)) as stream:
        said = list(events(stream))
    return said, [n for n in map(number, said) if n is not None]


def test_a_stream_cut_mid_turn_gets_exactly_what_it_missed(tmp_path: Any) -> None:
    server = start_server(tmp_path)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            first: list[dict[str, Any]] = []
            body = rpc("SendStreamingMessage", message("slow 4"))
            with http.stream("POST", "/", json=body, headers=headers(server)) as stream:
                for event in events(stream):
                    first.append(event)
                    if "tick 1/4" in text(event):
                        break  # the connection drops here
            task_id = first[0]["task"]["id"]
            seen = [n for n in map(number, first) if n is not None]
            assert seen == list(range(1, len(seen) + 1)), first
            time.sleep(2.2)  # ticks 2 and 3 are said while nobody listens
            again: list[dict[str, Any]] = []
            resume = headers(server, **{"Last-Event-ID": str(seen[-1])})
            body = rpc("SubscribeToTask", {"id": task_id})
            with http.stream("POST", "/", json=body, headers=resume) as stream:
                again = list(events(stream))
        numbers = seen + [n for n in map(number, again) if n is not None]
        assert numbers == list(range(1, len(numbers) + 1)), again  # each once, in order
        said = "".join(text(e) for e in first + again)
        for tick in range(1, 5):
            assert said.count(f"tick {tick}/4") == 1, said
        assert state(again[-1]) == "TASK_STATE_COMPLETED"
        assert not any("task" in e for e in again)  # no snapshot: nothing was lost
        # Taken up after the end: what was missed, then the stream ends.
        with httpx.Client(base_url=server.url, timeout=30) as http:
            late = headers(server, **{"Last-Event-ID": str(numbers[-3])})
            body = rpc("SubscribeToTask", {"id": task_id})
            with http.stream("POST", "/", json=body, headers=late) as stream:
                tail = list(events(stream))
        assert [number(e) for e in tail] == numbers[-2:]
    finally:
        server.stop()


def test_a_bad_last_event_id_is_refused_saying_what_it_wants(tmp_path: Any) -> None:
    server = start_server(tmp_path)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            done = http.post("/", json=rpc("SendMessage", message("hello")),
                             headers=headers(server)).json()["result"]["task"]  # fmt: skip
            body = rpc("SubscribeToTask", {"id": done["id"]})
            reply = http.post("/", json=body, headers=headers(server, **{"Last-Event-ID": "x1"}))
        assert "Last-Event-ID must be the number of the last event seen" in reply.text
    finally:
        server.stop()


def test_the_last_number_may_come_in_the_request_s_metadata(tmp_path: Any) -> None:
    """For a client whose library sets no headers: `params.metadata.lastSequence`,
    which the SDK's parse of a SubscribeToTask drops and tailagent reads."""
    server = start_server(tmp_path)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            said, numbers = streamed(http, server, "think tool")
            task_id = said[0]["task"]["id"]
            body = rpc(
                "SubscribeToTask", {"id": task_id, "metadata": {"lastSequence": numbers[-3]}}
            )
            with http.stream("POST", "/", json=body, headers=headers(server)) as stream:
                tail = list(events(stream))
            bad = rpc("SubscribeToTask", {"id": task_id, "metadata": {"lastSequence": "soon"}})
            reply = http.post("/", json=bad, headers=headers(server))
        assert [number(e) for e in tail] == numbers[-2:], tail
        assert "metadata.lastSequence must be the number of the last event seen" in reply.text
    finally:
        server.stop()


def test_a_number_older_than_what_is_kept_gets_the_snapshot_first(tmp_path: Any) -> None:
    (tmp_path / "tailagent.toml").write_text("events_kept = 3\n")
    server = start_server(tmp_path, "--config", str(tmp_path / "tailagent.toml"))
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            said, numbers = streamed(http, server, "think plan tool")
            assert len(numbers) > 4
            time.sleep(0.3)  # written, and the oldest let go
            body = rpc("SubscribeToTask", {"id": said[0]["task"]["id"]})
            old = headers(server, **{"Last-Event-ID": "1"})
            with http.stream("POST", "/", json=body, headers=old) as stream:
                again = list(events(stream))
        [only] = again
        assert only["task"]["metadata"]["replay"] == "snapshot"
        assert only["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        server.stop()


def test_http_json_subscribe_takes_up_from_the_last_number_too(tmp_path: Any) -> None:
    server = start_server(tmp_path)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            said, numbers = streamed(http, server, "think tool")
            path = f"/tasks/{said[0]['task']['id']}:subscribe"
            resume = headers(server, **{"Last-Event-ID": str(numbers[-3])})
            with http.stream("GET", path, headers=resume) as stream:
                tail = [json.loads(line.removeprefix("data:"))
                        for line in stream.iter_lines() if line.startswith("data:")]  # fmt: skip
        assert [number(e) for e in tail] == numbers[-2:], tail
    finally:
        server.stop()


def test_a_task_s_next_turn_numbers_on(tmp_path: Any) -> None:
    """An answer's turn goes on from the asking turn's last number, so a replay of the
    whole task has each number once."""
    server = start_server(tmp_path)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            body = rpc("SendStreamingMessage", message("ask"))
            with http.stream("POST", "/", json=body, headers=headers(server)) as stream:
                asked = list(events(stream))
            task_id = asked[0]["task"]["id"]
            prompt = asked[-1]["statusUpdate"]["status"]["message"]["parts"]
            request = next(p["data"]["requestId"] for p in prompt if "data" in p)
            answer = message("allow")
            answer["message"].update(taskId=task_id, metadata={"requestId": request})
            with http.stream("POST", "/", json=rpc("SendStreamingMessage", answer),
                             headers=headers(server)) as stream:  # fmt: skip
                answered = list(events(stream))
            time.sleep(0.2)
            body = rpc("SubscribeToTask", {"id": task_id})
            from_start = headers(server, **{"Last-Event-ID": "0"})
            with http.stream("POST", "/", json=body, headers=from_start) as stream:
                whole = list(events(stream))
        first = [n for n in map(number, asked) if n is not None]
        then = [n for n in map(number, answered) if n is not None]
        assert then[0] == first[-1] + 1, (first, then)
        assert [number(e) for e in whole] == first + then
    finally:
        server.stop()


def test_a_blocking_send_s_turn_is_numbered_not_kept_and_its_next_turn_numbers_on(
    tmp_path: Any,
) -> None:
    """A blocking SendMessage's first turn streams to nobody, so no stream can miss its
    events: they are numbered, not kept. The task's own number carries the count over
    a restart, to the answer's turn, and a replay from before it gets the snapshot, as
    for events no longer kept."""
    server = start_server(tmp_path)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            reply = http.post("/", json=rpc("SendMessage", message("ask")), headers=headers(server))
        asked = reply.json()["result"]["task"]
        assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        last = int(asked["metadata"]["sequence"])
        assert last > 1
    finally:
        server.stop()
    server = start_server(tmp_path, state_dir=server.state_dir)  # a restart: nothing in memory
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            parts = asked["status"]["message"]["parts"]
            request = next(p["data"]["requestId"] for p in parts if "data" in p)
            answer = message("allow")
            answer["message"].update(taskId=asked["id"], metadata={"requestId": request})
            with http.stream("POST", "/", json=rpc("SendStreamingMessage", answer),
                             headers=headers(server)) as stream:  # fmt: skip
                answered = [n for n in map(number, events(stream)) if n is not None]
            time.sleep(0.2)  # written
            body = rpc("SubscribeToTask", {"id": asked["id"]})
            from_start = headers(server, **{"Last-Event-ID": "0"})
            with http.stream("POST", "/", json=body, headers=from_start) as stream:
                whole = list(events(stream))
        assert answered == list(range(last + 1, last + 1 + len(answered))), (last, answered)
        [snapshot] = whole  # the task as it is now stands in for every event
        assert snapshot["task"]["metadata"]["replay"] == "snapshot"
        assert snapshot["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        server.stop()


def test_each_numbered_event_and_the_task_carry_the_number_as_generation_too(
    tmp_path: Any,
) -> None:
    """A2A's next version calls the number `generation`; on the 1.0 wire it rides in
    metadata beside `sequence`, the same number, on every event and the task."""
    server = start_server(tmp_path)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            said, numbers = streamed(http, server, "think plan tool edit")
            task_id = said[0]["task"]["id"]
            got = http.post("/", json=rpc("GetTask", {"id": task_id}), headers=headers(server))
        updates = [e.get("statusUpdate") or e.get("artifactUpdate") for e in said]
        pairs = [(u["metadata"]["sequence"], u["metadata"]["generation"]) for u in updates if u]
        assert pairs and all(s == g for s, g in pairs), pairs
        task = got.json()["result"]
        assert task["metadata"]["generation"] == task["metadata"]["sequence"] == numbers[-1]
    finally:
        server.stop()
