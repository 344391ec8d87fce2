"""tailagent on a real tailnet: Tailscale's own tailscaled (built from source at a pinned
release), `tailscale serve` and a control server of ours, all on this machine.

Everything about identity is tested against a fake tailscaled elsewhere; this proves the
same against the real one. One control server and three nodes serve the whole module.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import SendMessageRequest, TaskState

from tests.a2a_helpers import user_message
from tests.conftest import RunningServer, start_server
from tests.real_tailnet import Node, Tailnet, module_tailnet
from tests.tailnet import curl_as_nobody, refusal
from tests.warm_start import cli_run

CAPABILITY = "example.com/cap/tailagent"
CALLER_LOGIN = "user-2@fake-control.example.net"  # testcontrol names users in join order


@pytest.fixture(scope="module")
def tailnet() -> Iterator[Tailnet]:
    nodes = {"agentbox": {}, "callerbox": {"proxy": True},
             "cibox": {"proxy": True, "tags": ("tag:ci",)}}  # fmt: skip
    yield from module_tailnet(nodes)


@pytest.fixture(scope="module")
def agent(tailnet: Tailnet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """tailagent on the agent's box, behind `tailscale serve --http=80`."""
    tmp = tmp_path_factory.mktemp("agentbox")
    config = tmp / "tailagent.toml"
    config.write_text(
        f'[access]\nallowed_logins = ["{CALLER_LOGIN}"]\ncapability = "{CAPABILITY}"\n'
    )
    box = tailnet.nodes["agentbox"]
    server = start_server(
        tmp, "--config", str(config), "--tailscale-socket", str(box.socket),
        "--public-url", f"http://{box.dns_name}",
    )  # fmt: skip
    box.tailscale("serve", "--bg", "--http=80", server.url)
    yield server
    box.tailscale("serve", "--http=80", "off", check=False)
    server.stop()


def send(node: Node, url: str, text: str, **headers: str) -> httpx.Response:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": f"m-{time.monotonic_ns()}",
                "role": "ROLE_USER",
                "parts": [{"text": text}],
            }
        },
    }
    with httpx.Client(proxy=node.proxy, timeout=30) as http:
        return http.post(url, json=body, headers={"A2A-Version": "1.0", **headers})


def test_a_request_through_serve_is_the_caller_as_whois_says(
    tailnet: Tailnet, agent: RunningServer
) -> None:
    caller, box = tailnet.nodes["callerbox"], tailnet.nodes["agentbox"]
    response = send(caller, f"http://{box.dns_name}/", "hello over the tailnet")
    assert response.status_code == 200, response.text
    assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    login = box.whois(caller.ip())["UserProfile"]["LoginName"]
    assert login == CALLER_LOGIN
    assert f"user:{login} (tailscale serve)" in agent.last_access_line()


def test_a_local_process_forging_headers_is_refused(tailnet: Tailnet, agent: RunningServer) -> None:
    caller = tailnet.nodes["callerbox"]
    forged = {"X-Forwarded-For": caller.ip(), "Tailscale-User-Login": CALLER_LOGIN}
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    result = curl_as_nobody(agent.url + "/", headers=forged, body=body)
    assert result.stdout == "401", result
    assert "X-Forwarded-For ignored" in agent.last_access_line()


def test_a_peer_straight_to_the_tailnet_address_is_itself(
    tailnet: Tailnet, agent: RunningServer
) -> None:
    caller, box = tailnet.nodes["callerbox"], tailnet.nodes["agentbox"]
    port = agent.url.rsplit(":", 1)[1]
    # Userspace networking forwards the peer's raw TCP to 127.0.0.1:<same port>.
    response = send(
        caller,
        f"http://{box.ip()}:{port}/",
        "direct",
        **{"X-Forwarded-For": "100.64.0.99", "Tailscale-User-Login": "someone@else"},
    )
    assert response.status_code == 200, response.text
    assert f"user:{CALLER_LOGIN} (tailnet connection)" in agent.last_access_line()


def test_a_tagged_node_is_its_tags_and_a_grant_gives_it_a_role(
    tailnet: Tailnet, agent: RunningServer
) -> None:
    ci, box = tailnet.nodes["cibox"], tailnet.nodes["agentbox"]
    assert box.whois(ci.ip())["Node"]["Tags"] == ["tag:ci"]
    refused = send(ci, f"http://{box.dns_name}/", "tagged, no grant")
    assert refused.status_code == 403
    assert "access.allowed_tags" in refusal(refused.json())[1]
    tailnet.grant({CAPABILITY: [{"role": "caller"}]})
    try:
        time.sleep(2.5)  # past the whois cache
        allowed = send(ci, f"http://{box.dns_name}/", "tagged, granted")
        assert allowed.status_code == 200, allowed.text
        assert "tags:tag:ci (tailscale serve)" in agent.last_access_line()
    finally:
        tailnet.grant({})
        time.sleep(2.5)


async def test_a_task_with_a_permission_prompt_answered_across_the_tailnet(
    tailnet: Tailnet, agent: RunningServer
) -> None:
    caller, box = tailnet.nodes["callerbox"], tailnet.nodes["agentbox"]
    async with httpx.AsyncClient(proxy=caller.proxy, headers={"A2A-Version": "1.0"},
                                 timeout=30) as http:  # fmt: skip
        client = await create_client(f"http://{box.dns_name}", ClientConfig(httpx_client=http))
        events = [
            e
            async for e in client.send_message(
                SendMessageRequest(message=user_message("ask:tailnet"))
            )
        ]
        task = events[0].task
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        answer = user_message("yes", task_id=task.id)
        done = [e async for e in client.send_message(SendMessageRequest(message=answer))]
        assert done[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        await client.close()
    rows = audit_rows(agent)
    mine = next(r for r in rows if r["task_id"] == task.id)
    assert mine["decision"] == "allow" and mine["answered_by"].startswith(f"user:{CALLER_LOGIN}")


def peers_seen_from(
    caller: Node, known: Path, command: list[str] | None = None,
    base_env: dict[str, str] | None = None,
) -> list[dict[str, str]]:  # fmt: skip
    """`tailagent peers --json` run on the caller's box, through its tailscaled; by
    this interpreter's tailagent, or `command` (the one-file binary)."""
    env = {**(base_env or os.environ), "HTTP_PROXY": caller.proxy,
           "TAILAGENT_KNOWN_AGENTS": str(known)}  # fmt: skip
    peers = cli_run(
        [*(command or [sys.executable, "-m", "tailagent"]), "peers", "--json",
         "--scheme", "http", "--port", "80", "--tailscale-socket", str(caller.socket)],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert peers.returncode == 0, peers.stderr
    return [json.loads(line) for line in peers.stdout.splitlines()]


def audit_rows(server: RunningServer) -> list[dict[str, str]]:
    audit = cli_run(
        [sys.executable, "-m", "tailagent", "audit", "--json",
         "--state-dir", str(server.state_dir)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return [json.loads(line) for line in audit.stdout.splitlines()]


def unix_server(tmp_path: Path, box: Node) -> tuple[RunningServer, Path]:
    """tailagent on the box on a unix socket (in /tmp: a socket path must be short)."""
    socket_path = Path(f"/tmp/ta-{os.getpid()}-{time.monotonic_ns()}.sock")
    config = tmp_path / "c.toml"
    config.write_text(f'[access]\nallowed_logins = ["{CALLER_LOGIN}"]\n')
    server = start_server(tmp_path, "--config", str(config), "--tailscale-socket",
                          str(box.socket), listen=f"unix:{socket_path}")  # fmt: skip
    return server, socket_path


def test_the_unix_socket_listener_behind_serve(tailnet: Tailnet, tmp_path: Path) -> None:
    caller, box = tailnet.nodes["callerbox"], tailnet.nodes["agentbox"]
    server, socket_path = unix_server(tmp_path, box)
    try:
        box.tailscale("serve", "--bg", "--http=81", f"unix:{socket_path}")
        response = send(caller, f"http://{box.dns_name}:81/", "over a unix socket")
        assert response.status_code == 200, response.text
        assert f"user:{CALLER_LOGIN} (tailscale serve (unix socket))" in server.last_access_line()
        # tailscaled (root) reaches the socket; another local user cannot even connect.
        forged = curl_as_nobody("http://localhost/", headers={"X-Forwarded-For": caller.ip()},
                                body={}, unix_socket=socket_path)  # fmt: skip
        assert forged.stdout == "000"
    finally:
        box.tailscale("serve", "--http=81", "off", check=False)
        server.stop()


def test_serve_tailnet_configures_the_real_tailscaled_and_removes_its_entry(
    tailnet: Tailnet, agent: RunningServer, tmp_path: Path
) -> None:
    box = tailnet.nodes["agentbox"]
    server = start_server(tmp_path, "--tailnet", "--tailnet-port", "8443",
                          "--tailscale-socket", str(box.socket))  # fmt: skip
    try:
        served = json.loads(box.tailscale("serve", "status", "--json"))
        site = served["Web"][f"{box.dns_name}:8443"]
        assert site["Handlers"]["/"]["Proxy"] == server.url
        assert f"{box.dns_name}:80" in served["Web"]  # the other entry is untouched
    finally:
        assert server.stop() == 0
    served = json.loads(box.tailscale("serve", "status", "--json"))
    assert f"{box.dns_name}:8443" not in served.get("Web", {})
    assert f"{box.dns_name}:80" in served["Web"]


def test_peers_from_the_callers_box_and_doctor_on_the_agents(
    tailnet: Tailnet, agent: RunningServer, tmp_path: Path
) -> None:
    caller, box = tailnet.nodes["callerbox"], tailnet.nodes["agentbox"]
    rows = peers_seen_from(caller, tmp_path / "known.json")
    assert [r["peer"] for r in rows] == [box.dns_name]  # cibox runs no tailagent: absent
    assert rows[0]["signature"] == "valid (key from jku, not pinned)"
    doctor = cli_run(
        [sys.executable, "-m", "tailagent", "doctor", "--agent", "echo",
         "--listen", agent.url.removeprefix("http://"), "--state-dir", str(agent.state_dir),
         "--tailscale-socket", str(box.socket)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert doctor.returncode == 0, doctor.stdout
    assert all(line.startswith("✓") for line in doctor.stdout.splitlines())


BURST = 100


async def burst(node: Node, url: str, size: int = BURST) -> list[int]:
    """`size` requests at once from `node`, each on a new connection, as a browser
    opening the desk or a few agents calling together make; their status codes."""
    limits = httpx.Limits(max_connections=size, max_keepalive_connections=0)
    async with httpx.AsyncClient(proxy=node.proxy, timeout=120, limits=limits) as http:

        async def one(n: int) -> int:
            body = {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": {
                "messageId": f"burst-{n}-{time.monotonic_ns()}", "role": "ROLE_USER",
                "parts": [{"text": f"burst {n}"}]}}}  # fmt: skip
            response = await http.post(url, json=body, headers={"A2A-Version": "1.0"})
            return response.status_code

        return list(await asyncio.gather(*(one(n) for n in range(size))))


def identified(server: RunningServer, how: str) -> int:
    """Access lines of SendMessage requests that whois named the caller on."""
    return sum(
        1
        for line in server.log().splitlines()
        if f"user:{CALLER_LOGIN} ({how}) POST / SendMessage -> 200" in line
    )


async def identified_at_least(server: RunningServer, how: str, want: int) -> int:
    """`identified`, once it reaches `want` or 10 s have passed: the access line is
    written after the response has gone, so the last of a burst can trail its 200
    (a clean-clone CI run counted 99 of 100 at once)."""
    for _ in range(200):
        if (count := identified(server, how)) >= want:
            return count
        await asyncio.sleep(0.05)
    return identified(server, how)


async def test_a_burst_through_serve_to_the_tcp_listener_all_get_in(
    tailnet: Tailnet, agent: RunningServer
) -> None:
    """Each new connection from `tailscale serve` costs a whois of its loopback ip:port
    that tailscaled answers one at a time (~180 ms a miss): the burst waits its turn."""
    caller, box = tailnet.nodes["callerbox"], tailnet.nodes["agentbox"]
    before = identified(agent, "tailscale serve")
    codes = await burst(caller, f"http://{box.dns_name}/")
    assert codes == [200] * BURST, sorted(set(codes))
    assert await identified_at_least(agent, "tailscale serve", before + BURST) == (before + BURST)


async def test_a_burst_through_serve_to_the_unix_socket_all_get_in(
    tailnet: Tailnet, tmp_path: Path
) -> None:
    caller, box = tailnet.nodes["callerbox"], tailnet.nodes["agentbox"]
    server, socket_path = unix_server(tmp_path, box)
    try:
        box.tailscale("serve", "--bg", "--http=83", f"unix:{socket_path}")
        codes = await burst(caller, f"http://{box.dns_name}:83/")
        assert codes == [200] * BURST, sorted(set(codes))
        how = "tailscale serve (unix socket)"
        assert await identified_at_least(server, how, BURST) == BURST
    finally:
        box.tailscale("serve", "--http=83", "off", check=False)
        server.stop()
