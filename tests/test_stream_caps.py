"""No caller can starve the others of connections or of push deliveries (issue 32).

The attacks, against a real server: one tailnet identity held a thousand streams
(SubscribeToTask, the desk's /desk/events, streamed sends) and took the server's
1,024 descriptors, so every other caller got 503; and one task took 2,000 push
configs, each a signed POST at every state change. Here one person, alice, opens
streams past `max_streams_per_caller` and gets 429 before anything of the request
runs, while bob still streams and /healthz answers; a stream that ends, or whose
client goes away, gives its place back. The server is started with a low soft limit
on open files under a higher hard one, and raises it. Push configs stop at
`push.max_configs_per_task`, made with CreateTaskPushNotificationConfig or sent
with a message.

People are tailnet identities from the stand-in tailscaled, reached the way
`tailscale serve` reaches the server (X-Forwarded-For from a root-owned socket).
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer, start_server
from tests.tailnet import FakeTailscaled, whois

CAP = 3
PUSH_CAP = 2
LOW_SOFT_LIMIT = 256
CONFIG = f"""
max_streams_per_caller = {CAP}

[access]
allowed_logins = ["alice@example.com", "bob@example.com"]
login_roles = ["caller", "approver"]

[push]
allowed_hosts = ["127.0.0.1"]
max_configs_per_task = {PUSH_CAP}
attempts = 1
"""
PEOPLE = {
    "alice": whois("alice@example.com", name="alice-laptop", ip="100.64.0.31"),
    "bob": whois("bob@example.com", name="bob-laptop", ip="100.64.0.32"),
}
# Starts tailagent with the soft limit on open files lowered and the hard one kept, as
# systemd starts a service (1024 under 524288).
LAUNCH = (
    "import os, resource, sys; hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({LOW_SOFT_LIMIT}, hard)); "
    "os.execv(sys.executable, [sys.executable, '-m', 'tailagent', *sys.argv[1:]])"
)
HOOK = "http://127.0.0.1:9/hook"  # allowed; nothing listens, and one attempt is made


def ip_of(person: str) -> str:
    return str(PEOPLE[person]["Node"]["Addresses"][0].split("/")[0])


def headers(person: str) -> dict[str, str]:
    return {"A2A-Version": "1.0", "X-Forwarded-For": ip_of(person)}


def rpc_body(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def message(text: str, **fields: Any) -> dict[str, Any]:
    return {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}], **fields}


@dataclass
class Team:
    server: RunningServer
    fake: FakeTailscaled
    working: str  # a task of alice's that works for minutes: what her streams follow

    def rpc(self, person: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        reply = httpx.post(self.server.url + "/", json=rpc_body(method, params),
                           headers=headers(person), timeout=30)  # fmt: skip
        answer: dict[str, Any] = reply.json()
        return answer


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    tmp = tmp_path_factory.mktemp("stream-caps")
    fake = FakeTailscaled(tmp / "tailscaled").start()
    for person, seen in PEOPLE.items():
        fake.peers[ip_of(person)] = seen
    fake.write()
    config = tmp / "tailagent.toml"
    config.write_text(CONFIG)
    server = start_server(tmp, "--config", str(config), "--isolation", "shared",
                          "--tailscale-socket", str(fake.socket),
                          command=[sys.executable, "-c", LAUNCH])  # fmt: skip
    made = Team(server, fake, "")
    started = made.rpc("alice", "SendMessage", {"message": message("slow 600"),
                       "configuration": {"returnImmediately": True}})  # fmt: skip
    made.working = started["result"]["task"]["id"]
    yield made
    server.stop()
    fake.stop()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


class Streams:
    """Requests held open, as a client holding streams does, closed at the end."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url
        # Each open response with its lines, read on with anext(): leaving an `async for`
        # over them would close the response.
        self.open: dict[httpx.Response, AsyncIterator[str]] = {}

    async def start(self, person: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """Sends a request and reads its head; a 200 is held open, its first event read."""
        request = self.http.build_request(method, self.url + path, headers=headers(person),
                                          **kwargs)  # fmt: skip
        response = await self.http.send(request, stream=True)
        if response.status_code != 200:
            await response.aread()
            return response
        lines = self.open[response] = response.aiter_lines()
        async with asyncio.timeout(10):
            while not (await anext(lines)).startswith("data:"):
                pass
        return response

    async def subscribe(self, person: str, task_id: str) -> httpx.Response:
        body = rpc_body("SubscribeToTask", {"id": task_id})
        return await self.start(person, "POST", "/", json=body)

    async def close(self, response: httpx.Response) -> None:
        del self.open[response]
        await response.aclose()

    async def close_all(self) -> None:
        for response in list(self.open):
            await self.close(response)


@pytest.fixture
async def streams(team: Team, http: httpx.AsyncClient) -> AsyncIterator[Streams]:
    held = Streams(http, team.server.url)
    yield held
    await held.close_all()


async def until_opened(streams: Streams, person: str, task_id: str) -> httpx.Response:
    """A subscription, tried until the server has noticed a place was given back (it
    learns of a closed connection a moment after the client closes it)."""
    for _ in range(200):
        response = await streams.subscribe(person, task_id)
        if response.status_code != 429:
            return response
        await asyncio.sleep(0.05)
    raise AssertionError(f"no place for a stream of {person}'s came back within 10 s")


def alices_tasks(team: Team) -> int:
    return len(team.rpc("alice", "ListTasks", {})["result"].get("tasks", []))


def test_the_server_raises_its_open_files_soft_limit_to_the_hard_one(team: Team) -> None:
    limits = Path(f"/proc/{team.server.process.pid}/limits")
    if not limits.exists():
        pytest.skip("no /proc/<pid>/limits here (not Linux) to read the server's limits from")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard > LOW_SOFT_LIMIT, "the test's own hard limit leaves nothing to raise"
    line = next(x for x in limits.read_text().splitlines() if x.startswith("Max open files"))
    soft_now, hard_now = line.split()[3:5]
    assert (int(soft_now), int(hard_now)) == (hard, hard)
    assert f"open files: up to {hard} (raised from the soft limit, {LOW_SOFT_LIMIT})" in (
        team.server.log()
    )


async def test_past_the_cap_a_callers_streams_get_429_and_others_go_on(
    team: Team, streams: Streams, http: httpx.AsyncClient
) -> None:
    for _ in range(CAP):  # (the places of an earlier test's streams may still be held)
        assert (await until_opened(streams, "alice", team.working)).status_code == 200

    refused = await streams.subscribe("alice", team.working)
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert error["code"] == -32600
    assert error["data"] == {"httpStatus": 429, "error": "too many streams"}
    assert error["message"].startswith(f"user:alice@example.com holds {CAP} open streams")
    assert f"max_streams_per_caller = {CAP}" in error["message"]

    rest = await streams.start("alice", "GET", f"/tasks/{team.working}:subscribe")
    assert rest.status_code == 429
    assert rest.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    desk = await streams.start("alice", "GET", "/desk/events")
    assert desk.status_code == 429
    assert "max_streams_per_caller" in desk.text

    before = alices_tasks(team)
    send = rpc_body("SendStreamingMessage", {"message": message("hello")})
    assert (await streams.start("alice", "POST", "/", json=send)).status_code == 429
    assert alices_tasks(team) == before, "a refused stream's message must not run"
    assert "result" in team.rpc("alice", "GetTask", {"id": team.working})  # not a stream

    # Bob, another person, streams on: the list on the desk, and a turn to its end.
    bobs = await streams.start("bob", "GET", "/desk/events")
    assert bobs.status_code == 200
    async with http.stream("POST", team.server.url + "/", json=send,
                           headers=headers("bob")) as turn:  # fmt: skip
        assert turn.status_code == 200
        events = [json.loads(line[5:]) async for line in turn.aiter_lines()
                  if line.startswith("data:")]  # fmt: skip
    assert events[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert (await http.get(team.server.url + "/healthz")).status_code == 200


async def test_a_stream_that_ends_or_is_closed_gives_its_place_back(
    team: Team, streams: Streams
) -> None:
    held = [await until_opened(streams, "alice", team.working) for _ in range(CAP)]
    assert (await streams.subscribe("alice", team.working)).status_code == 429

    await streams.close(held[0])  # the client goes away
    assert (await until_opened(streams, "alice", team.working)).status_code == 200
    assert (await streams.subscribe("alice", team.working)).status_code == 429

    desk = await streams.start("alice", "GET", "/desk/events")
    assert desk.status_code == 429
    await streams.close(held[1])
    desk = await streams.start("alice", "GET", "/desk/events")
    for _ in range(100):  # the page's stream, once the server has seen the close
        if desk.status_code == 200:
            break
        await asyncio.sleep(0.05)
        desk = await streams.start("alice", "GET", "/desk/events")
    assert desk.status_code == 200

    # Streams that run out by themselves: a turn streamed to its end frees its place.
    await streams.close_all()
    for _ in range(CAP + 2):
        send = rpc_body("SendStreamingMessage", {"message": message("hello")})
        async with streams.http.stream("POST", team.server.url + "/", json=send,
                                       headers=headers("alice")) as turn:  # fmt: skip
            assert turn.status_code == 200
            await turn.aread()
    held = [await streams.subscribe("alice", team.working) for _ in range(CAP)]
    assert [r.status_code for r in held] == [200] * CAP


def push_config(task_id: str, config_id: str) -> dict[str, Any]:
    return {"taskId": task_id, "id": config_id, "url": HOOK}


def test_a_task_holds_at_most_the_cap_of_push_configs_created(team: Team) -> None:
    task_id = team.rpc("alice", "SendMessage", {"message": message("ask")})["result"]["task"]["id"]
    for n in range(PUSH_CAP):
        made = team.rpc("alice", "CreateTaskPushNotificationConfig", push_config(task_id, f"c{n}"))
        assert made["result"]["id"] == f"c{n}"

    over = team.rpc("alice", "CreateTaskPushNotificationConfig", push_config(task_id, "more"))
    assert over["error"]["code"] == -32602
    assert f"has {PUSH_CAP} push notification configs" in over["error"]["message"]
    assert f"push.max_configs_per_task = {PUSH_CAP}" in over["error"]["message"]
    rest = httpx.post(f"{team.server.url}/tasks/{task_id}/pushNotificationConfigs",
                      json=push_config(task_id, "more"), headers=headers("alice"))  # fmt: skip
    assert rest.status_code == 400
    assert rest.json()["error"]["status"] == "INVALID_ARGUMENT"

    # A config under an id the task holds replaces it, and is not one more.
    replaced = {**push_config(task_id, "c0"), "token": "new"}
    assert team.rpc("alice", "CreateTaskPushNotificationConfig", replaced)["result"]["id"] == "c0"
    listed = team.rpc("alice", "ListTaskPushNotificationConfigs", {"taskId": task_id})
    configs = listed["result"]["configs"]
    assert sorted(c["id"] for c in configs) == [f"c{n}" for n in range(PUSH_CAP)]
    assert next(c for c in configs if c["id"] == "c0")["token"] == "new"


def test_configs_sent_with_messages_count_against_the_same_cap(team: Team) -> None:
    inline = {"taskPushNotificationConfig": {"id": "first", "url": HOOK}}
    started = team.rpc("alice", "SendMessage", {"message": message("ask"),
                       "configuration": inline})  # fmt: skip
    task = started["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    for n in range(1, PUSH_CAP):
        team.rpc("alice", "CreateTaskPushNotificationConfig", push_config(task["id"], f"c{n}"))

    answer = message("allow", taskId=task["id"])
    again = {"taskPushNotificationConfig": {"id": "one-more", "url": HOOK}}
    refused = team.rpc("alice", "SendMessage", {"message": answer, "configuration": again})
    assert refused["error"]["code"] == -32602
    assert f"push.max_configs_per_task = {PUSH_CAP}" in refused["error"]["message"]
    still = team.rpc("alice", "GetTask", {"id": task["id"]})["result"]
    assert still["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert len(still["history"]) == len(task["history"]), "the refused answer was kept"
