"""Streams carry each event's number as its SSE `id:` line (tailagent/mends/sse_ids.py), so
an SSE client resumes by itself: on every binding a2a-sdk writes, and with a real
`EventSource` in Chromium whose connection a relay cuts mid-turn. The echo agent's
`slow N` says a tick a second."""

from __future__ import annotations

import asyncio
import contextlib
import json
import queue
import re
import threading
import uuid
from typing import Any

import httpx
from playwright.sync_api import Browser

from tests.conftest import RunningServer, start_server
from tests.test_resume_stream import events, headers, message, number, rpc, text

EVENT_SOURCE = """path => {
    window.got = []; window.opens = 0; window.done = false;
    const source = new EventSource(path);
    source.onopen = () => { window.opens += 1; };
    source.onmessage = event => {
        const data = JSON.parse(event.data);
        window.got.push({id: event.lastEventId, data, connection: window.opens});
        const update = data.statusUpdate;
        if (update && update.status.state === "TASK_STATE_COMPLETED") {
            source.close();
            window.done = true;
        }
    };
}"""


class CutRelay:
    """A loopback TCP relay to the server that cuts every connection through it at once,
    as a network would (`cut`), and keeps what clients sent, to read their requests."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.sent = bytearray()
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self._ready.wait(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        self._writers |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer, True), self._pipe(up_reader, writer))

    async def _pipe(
        self, source: asyncio.StreamReader, to: asyncio.StreamWriter, keep: bool = False
    ) -> None:
        try:
            while chunk := await source.read(65536):
                if keep:
                    self.sent += chunk
                to.write(chunk)
                await to.drain()
        except OSError:
            pass
        finally:
            self._writers.discard(to)
            with contextlib.suppress(Exception):
                to.close()

    def cut(self) -> None:
        async def cutting() -> None:
            for writer in list(self._writers):
                writer.transport.abort()

        asyncio.run_coroutine_threadsafe(cutting(), self._loop).result(5)

    def stop(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._loop.stop)


def frames(body: str) -> list[tuple[str | None, dict[str, Any]]]:
    """An SSE answer's frames with data, as (its `id:`, its data's JSON)."""
    found = []
    for frame in re.split(r"\r\n\r\n|\n\n", body):
        fields = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if "data" in fields:
            found.append((fields.get("id"), json.loads(fields["data"])))
    return found


def update_of(data: dict[str, Any]) -> dict[str, Any] | None:
    """The status or artifact update a frame carries (under a JSON-RPC `result`, as a
    1.0 StreamResponse's member, or as a 0.3 event), None for a task or a message."""
    event = data.get("result", data)
    update = event.get("statusUpdate") or event.get("artifactUpdate")
    return update or (event if event.get("kind") in ("status-update", "artifact-update") else None)


def message_0_3(words: str) -> dict[str, Any]:
    return {"message": {"messageId": uuid.uuid4().hex, "role": "user", "kind": "message",
                        "parts": [{"kind": "text", "text": words}]}}  # fmt: skip


def rest_0_3(words: str) -> dict[str, Any]:
    """A 0.3 HTTP+JSON send: its proto's JSON, whose parts are `content`."""
    return {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                        "content": [{"text": words}]}}  # fmt: skip


def streamed_turns(server: RunningServer) -> dict[str, str]:
    """One streamed turn on each of a2a-sdk's SSE writers, each answer as it came."""
    token = {"Authorization": f"Bearer {server.token}"}
    asks = {
        "JSON-RPC 1.0": ("/", rpc("SendStreamingMessage", message("think tool")), headers(server)),
        "HTTP+JSON 1.0": ("/message:stream", message("think tool"), headers(server)),
        "JSON-RPC 0.3": ("/", rpc("message/stream", message_0_3("think tool")), token),
        "HTTP+JSON 0.3": ("/v1/message:stream", rest_0_3("think tool"), token),
    }
    with httpx.Client(base_url=server.url, timeout=30) as http:
        return {
            name: http.post(path, json=body, headers=sent).text
            for name, (path, body, sent) in asks.items()
        }


def test_every_binding_s_frames_carry_their_event_s_number_as_id(tmp_path: Any) -> None:
    server = start_server(tmp_path)
    try:
        answers = streamed_turns(server)
    finally:
        server.stop()
    for name, body in answers.items():
        said = frames(body)
        updates = [(i, u) for i, data in said if (u := update_of(data)) is not None]
        assert len(updates) > 3, (name, body[:500])
        for i, update in updates:
            assert i == str(int(update["metadata"]["sequence"])), (name, i, update)
        others = [i for i, data in said if update_of(data) is None]
        assert others and set(others) == {None}, (name, body[:500])  # the task's


def read_turn(server: RunningServer, words: str, task_ids: queue.Queue[str]) -> list[dict]:
    """A streamed turn read to its end by a client of its own, straight from the server:
    every event, to compare with what the browser got."""
    said: list[dict[str, Any]] = []
    with httpx.Client(base_url=server.url, timeout=60) as http:
        body = rpc("SendStreamingMessage", message(words))
        with http.stream("POST", "/", json=body, headers=headers(server)) as stream:
            for event in events(stream):
                if not said:
                    task_ids.put(event["task"]["id"])
                said.append(event)
    return said


def test_an_event_source_cut_mid_turn_resumes_by_itself_and_gets_each_event_once(
    tmp_path: Any, browser: Browser
) -> None:
    server = start_server(tmp_path)
    relay = CutRelay(int(server.url.rsplit(":", 1)[1]))
    task_ids: queue.Queue[str] = queue.Queue()
    whole: list[list[dict[str, Any]]] = []
    reader = threading.Thread(target=lambda: whole.append(read_turn(server, "slow 8", task_ids)))
    reader.start()
    context = browser.new_context(
        extra_http_headers={"Authorization": f"Bearer {server.token}", "A2A-Version": "1.0"}
    )
    try:
        task_id = task_ids.get(timeout=30)
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{relay.port}/healthz")
        page.evaluate(EVENT_SOURCE, f"/tasks/{task_id}:subscribe")
        page.wait_for_function(
            "window.got.some(e => e.id && JSON.stringify(e.data).includes('tick '))",
            timeout=30_000,
        )
        relay.cut()
        page.wait_for_function("window.done", timeout=60_000)
        got = page.evaluate("window.got")
        opens = page.evaluate("window.opens")
        reader.join(30)
    finally:
        context.close()
        relay.stop()
        server.stop()
    assert opens == 2, got  # it came back by itself, once
    asked = re.findall(rb"GET /tasks/\S+:subscribe HTTP/1.1\r\n(.*?)\r\n\r\n", relay.sent, re.S)
    assert len(asked) == 2, relay.sent
    assert b"last-event-id" not in asked[0].lower()
    resumed_from = re.search(rb"(?i)last-event-id: (\d+)", asked[1])
    assert resumed_from is not None, asked[1]
    last = int(resumed_from.group(1))
    # Each numbered event once, in order: the reader's own, from where the browser began.
    reference = {int(n): e for e in whole[0] if (n := number(e)) is not None}
    numbered = [(e, int(n)) for e in got if (n := number(e["data"])) is not None]
    numbers = [n for _, n in numbered]
    assert numbers == list(range(numbers[0], max(reference) + 1)), numbers
    for event, n in numbered:
        assert event["id"] == str(n)
        assert event["data"] == reference[n]
    before = [n for e, n in numbered if e["connection"] == 1]
    after = [n for e, n in numbered if e["connection"] == 2]
    assert before[-1] == last and after[0] == last + 1, (before, after)
    assert len(numbered) == len(got) - 1  # the task first, and no snapshot on resuming
    ticks = "".join(text(e["data"]) for e in got)
    first_tick = int(re.search(r"tick (\d)/8", ticks).group(1))  # type: ignore[union-attr]
    for tick in range(first_tick, 9):
        assert ticks.count(f"tick {tick}/8") == 1, ticks
