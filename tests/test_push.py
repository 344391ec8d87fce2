"""Push notifications through a real server: deliveries to a real receiver on
loopback (allowlisted explicitly, as an operator would), signed with the card's
key and checked against its JWKS; refused targets; retries; a receiver that hangs
never holding up a turn."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from a2a.types.a2a_pb2 import (
    AuthenticationInfo,
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    ListTaskPushNotificationConfigsRequest,
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import A2AError
from hypercorn.asyncio import serve

from tests.a2a_helpers import A2A, Turn, user_message
from tests.conftest import RunningServer, start_server
from tests.tailnet import FakeTailscaled
from tests.webhook import loopback_config, request_body


@dataclass
class Delivery:
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed

    @property
    def state(self) -> str:
        payload = self.json
        status = (payload.get("statusUpdate") or payload["task"])["status"]
        return str(status["state"]).removeprefix("TASK_STATE_").lower()


@dataclass
class Receiver:
    """A webhook on loopback that records every POST and answers as scripted."""

    url: str = ""
    deliveries: list[Delivery] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # answers to the next POSTs, then 200
    hold: asyncio.Event | None = None  # while set to an unset Event, every POST hangs
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    answered: int = 0
    answers: list[int] = field(default_factory=list)  # the statuses sent, in order

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await request_body(receive)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.deliveries.append(Delivery(headers, body))
        self.arrived.set()
        if self.hold is not None:
            await self.hold.wait()
        status = self.statuses.pop(0) if self.statuses else 200
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        self.answered += 1
        self.answers.append(status)

    async def wait_for(self, count: int) -> list[Delivery]:
        async with asyncio.timeout(10):
            while len(self.deliveries) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return self.deliveries

    async def settle(self, quiet: float = 0.3) -> list[Delivery]:
        """Every delivery, once none has arrived for `quiet` seconds."""
        seen = -1
        while seen != len(self.deliveries):
            seen = len(self.deliveries)
            await asyncio.sleep(quiet)
        return self.deliveries


@contextlib.asynccontextmanager
async def receiving() -> AsyncIterator[Receiver]:
    """A Receiver served by Hypercorn on a loopback port of its own."""
    receiver = Receiver()
    config, port = loopback_config()
    receiver.url = f"http://127.0.0.1:{port}/hook"
    stop = asyncio.Event()
    serving = asyncio.create_task(serve(receiver, config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
    try:
        yield receiver
    finally:
        if receiver.hold is not None:
            receiver.hold.set()
        stop.set()
        await serving


def push_server(tmp: Path, *extra: str, allowed: str = "127.0.0.1") -> RunningServer:
    config = tmp / "push.toml"
    config.write_text(
        f'[push]\nallowed_hosts = ["{allowed}"]\nattempts = 3\nretry_delay = 0.05\ntimeout = 2\n'
    )
    return start_server(tmp, "--config", str(config), *extra)


@pytest.fixture(scope="module")
def pushing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One push server for the tests that neither restart nor reconfigure it: each has
    its own receiver, and looks only at its own tasks and their deliveries."""
    server = push_server(tmp_path_factory.mktemp("push"))
    yield server
    server.stop()


async def send_with_push(a2a: A2A, text: str, url: str, token: str = "t0k", **config: Any) -> Turn:
    push = TaskPushNotificationConfig(url=url, token=token, **config)
    request = SendMessageRequest(
        message=user_message(text),
        configuration=SendMessageConfiguration(task_push_notification_config=push),
    )
    turn = Turn()
    async with a2a.client() as client:
        async for event in client.send_message(request):
            turn.events.append(event)
    return turn


async def parked_with_push(a2a: A2A, url: str) -> Turn:
    """A task waiting for an answer, with a push config added once it had started."""
    parked = await a2a.turn("ask")
    async with a2a.client() as client:
        await client.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=parked.task_id, url=url)
        )
    return parked


async def verified_claims(server: RunningServer, delivery: Delivery, url: str) -> dict[str, Any]:
    """The JWT's claims, checked against the JWKS the server publishes, as a receiver would."""
    token = delivery.headers["x-a2a-notification-signature"]
    header = jwt.get_unverified_header(token)
    assert header["jku"] == server.url + "/.well-known/jwks.json"
    async with httpx.AsyncClient() as http:
        jwks = (await http.get(header["jku"])).json()
    key = next(k for k in jwks["keys"] if k["kid"] == header["kid"])
    claims: dict[str, Any] = jwt.decode(
        token, jwt.PyJWK(key).key, algorithms=[header["alg"]], audience=url, issuer=server.url
    )
    assert claims["request_body_sha256"] == hashlib.sha256(delivery.body).hexdigest()
    return claims


async def test_every_state_change_is_pushed_signed_and_in_order(pushing: RunningServer) -> None:
    a2a = A2A(pushing.url, pushing.token)
    async with receiving() as receiver:
        first = await send_with_push(a2a, "ask", receiver.url)
        assert first.final_state == "input_required"
        async with a2a.client() as client:
            answer = user_message("yes", task_id=first.task_id)
            async for _ in client.send_message(SendMessageRequest(message=answer)):
                pass
        deliveries = await receiver.settle()
    states = [d.state for d in deliveries]
    assert states[-3:] == ["input_required", "working", "completed"]
    assert states[0] in ("submitted", "working")
    assert all(a != b for a, b in itertools.pairwise(states))  # changes only
    last = deliveries[-1].json["task"]
    assert last["id"] == first.task_id and last["artifacts"]  # the result comes along
    for delivery in deliveries:
        assert delivery.headers["x-a2a-notification-token"] == "t0k"
        assert delivery.headers["authorization"] == (
            "Bearer " + delivery.headers["x-a2a-notification-signature"]
        )
        claims = await verified_claims(pushing, delivery, receiver.url)
        assert claims["task_id"] == first.task_id
    # A tampered body no longer matches the signed hash.
    forged = Delivery(deliveries[-1].headers, deliveries[-1].body.replace(b"completed", b"x"))
    with pytest.raises(AssertionError):
        await verified_claims(pushing, forged, receiver.url)


async def test_push_configs_can_be_created_read_listed_and_deleted(pushing: RunningServer) -> None:
    a2a = A2A(pushing.url, pushing.token)
    async with receiving() as receiver:
        parked = await a2a.turn("ask")
        async with a2a.client() as client:
            made = await client.create_task_push_notification_config(
                TaskPushNotificationConfig(
                    task_id=parked.task_id,
                    id="mine",
                    url=receiver.url,
                    authentication=AuthenticationInfo(scheme="Basic", credentials="dTpw"),
                )
            )
            assert made.id == "mine" and made.url == receiver.url
            got = await client.get_task_push_notification_config(
                GetTaskPushNotificationConfigRequest(task_id=parked.task_id, id="mine")
            )
            assert got.url == receiver.url
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=parked.task_id)
            )
            assert [c.id for c in listed.configs] == ["mine"]
            await a2a.cancel(parked.task_id)
            (delivery,) = await receiver.wait_for(1)
            assert delivery.state == "canceled"
            # The config's own credentials go in Authorization; the JWT beside them.
            assert delivery.headers["authorization"] == "Basic dTpw"
            await verified_claims(pushing, delivery, receiver.url)
            await client.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=parked.task_id, id="mine")
            )
            listed = await client.list_task_push_notification_configs(
                ListTaskPushNotificationConfigsRequest(task_id=parked.task_id)
            )
            assert not listed.configs


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://127.0.0.2:8080/hook", "a loopback address"),
        ("http://10.1.2.3/hook", "a private address"),
        ("http://169.254.169.254/latest/meta-data", "a link-local address"),
        ("http://[::1]:9/hook", "a loopback address"),
        ("http://8.8.8.8/hook", "a public address"),
        ("ftp://100.64.0.9/hook", "must be http or https"),
        ("http://100.64.0.9/hook", "cannot check push host"),  # no tailscaled to ask
        # Quad100 is tailscaled itself on every node: refused without asking it.
        ("http://100.100.100.100/hook", r"Tailscale's own service address \(Quad100"),
        ("http://[fd7a:115c:a1e0::53]:80/hook", r"Tailscale's own service address \(Quad100"),
    ],
)
async def test_targets_outside_the_tailnet_are_refused(a2a: A2A, url: str, reason: str) -> None:
    with pytest.raises(A2AError, match=reason):
        await send_with_push(a2a, "hello", url)
    parked = await a2a.turn("ask")
    async with a2a.client() as client:
        with pytest.raises(A2AError, match=reason):  # the same reason on both paths
            await client.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=parked.task_id, url=url)
            )
    await a2a.cancel(parked.task_id)


async def test_only_the_tailnets_peers_are_targets(tmp_path: Path) -> None:
    fake = FakeTailscaled(tmp_path / "tailscaled")
    fake.nodes = {
        "nodekey:1": {
            "DNSName": "ci-runner.tail1234.ts.net.",
            "TailscaleIPs": ["100.64.0.9", "fd7a:115c:a1e0::9"],
        }
    }
    fake.start()
    server = push_server(tmp_path, "--tailscale-socket", str(fake.socket))
    a2a = A2A(server.url, server.token)
    try:
        parked = await a2a.turn("ask")
        async with a2a.client() as client:
            for url in (
                "http://ci-runner.tail1234.ts.net:9/hook",
                "http://ci-runner:9/hook",
                "http://100.64.0.9:9/hook",
                "http://[fd7a:115c:a1e0::9]:9/hook",
            ):
                made = await client.create_task_push_notification_config(
                    TaskPushNotificationConfig(task_id=parked.task_id, url=url)
                )
                assert made.url == url
            for url, reason in [
                ("http://elsewhere.tail1234.ts.net/hook", "no peer's MagicDNS name"),
                ("http://devbox.tail1234.ts.net/hook", "this node's own name"),
                ("http://devbox/hook", "this node's own name"),
                ("http://100.64.0.1/hook", "this node's own address"),
                ("http://[fd7a:115c:a1e0::1]/hook", "this node's own address"),
                ("http://100.100.100.100/hook", r"own service address \(Quad100"),
                ("http://[fd7a:115c:a1e0::53]/hook", r"own service address \(Quad100"),
                ("http://100.64.0.77/hook", "a tailnet address that no peer holds"),
                ("http://[fd7a:115c:a1e0::77]/hook", "a tailnet address that no peer holds"),
            ]:
                with pytest.raises(A2AError, match=reason):
                    await client.create_task_push_notification_config(
                        TaskPushNotificationConfig(task_id=parked.task_id, url=url)
                    )
        await a2a.cancel(parked.task_id)
    finally:
        server.stop()
        fake.stop()


async def test_failed_deliveries_are_retried_a_bounded_number_of_times(
    pushing: RunningServer,
) -> None:
    a2a = A2A(pushing.url, pushing.token)
    async with receiving() as receiver:

        async def cancel_answering(*statuses: int, ends: str) -> list[Delivery]:
            """The POSTs of one cancelled task, the receiver answering as given, once
            its delivery has ended as `ends` says: at an accepting answer (200), or
            at the server's line that it gave up (so a slow box cannot cut it short)."""
            receiver.deliveries.clear()
            receiver.answers.clear()
            parked = await parked_with_push(a2a, receiver.url)
            receiver.statuses = list(statuses)
            await a2a.cancel(parked.task_id)
            gave_up = f"push for task {parked.task_id} to {receiver.url} failed after {ends}"

            def ended() -> bool:
                return 200 in receiver.answers if ends == "200" else gave_up in pushing.log()

            for _ in range(600):
                if ended():
                    return receiver.deliveries
                await asyncio.sleep(0.05)
            raise AssertionError(f"no end ({ends}) within 30 s: {receiver.answers}")

        retried = await cancel_answering(503, 503, ends="200")  # two failures, then accepted
        assert [d.state for d in retried] == ["canceled"] * 3
        assert len({d.headers["x-a2a-notification-signature"] for d in retried}) == 3
        # A refusal is final: no retry.
        refused = await cancel_answering(404, ends="1 attempt(s): HTTP 404")
        assert [d.state for d in refused] == ["canceled"]
        # Never accepted: three attempts (push.attempts).
        assert len(await cancel_answering(*[500] * 10, ends="3 attempt(s): HTTP 500")) == 3


async def test_a_receiver_that_hangs_never_holds_up_a_turn(pushing: RunningServer) -> None:
    a2a = A2A(pushing.url, pushing.token)
    async with receiving() as receiver:
        receiver.hold = asyncio.Event()  # every POST hangs until the test lets go
        turn = await send_with_push(a2a, "plan", receiver.url)
        assert turn.final_state == "completed"
        assert receiver.answered == 0  # the turn ended with no POST answered
        receiver.hold.set()
        deliveries = await receiver.settle()
    assert deliveries[-1].state == "completed"
