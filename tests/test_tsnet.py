"""`serve --tsnet`: tailagent as a tailnet node of its own, with no tailscaled on its side.

The suite's real tailnet (our control server, Tailscale's own tailscaled for the other
nodes) hosts a tailagent that joins through the embedded node; callers on tailscaled
nodes reach it by name and address, and everything about identity holds as it does
through tailscaled.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types.a2a_pb2 import (
    SendMessageConfiguration,
    SendMessageRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from hypercorn.asyncio import serve
from playwright.sync_api import expect, sync_playwright

from tailagent.tailnet.tsnet.library import library_path
from tests.a2a_helpers import user_message
from tests.browser import CHROMIUM, FLAGS
from tests.conftest import RunningServer, start_server
from tests.real_tailnet import Node, Tailnet, module_tailnet
from tests.tailnet import free_port, refusal
from tests.test_real_tailnet import audit_rows, peers_seen_from, send
from tests.warm_start import cli_run
from tests.webhook import loopback_config, request_body

CAPABILITY = "example.com/cap/tailagent"


@pytest.fixture(scope="module")
def tailnet() -> Iterator[Tailnet]:
    if not library_path().exists():
        if shutil.which("go") is None:
            pytest.skip("Go is not installed, so the embedded node was not built")
        pytest.fail(f"Go is here but the embedded node is not built: {library_path()} is missing")
    nodes = {"callerbox": {"proxy": True}, "cibox": {"proxy": True, "tags": ("tag:ci",)}}
    yield from module_tailnet(nodes, tags=("tag:ci", "tag:agent"))


def login_of(node: Node) -> str:
    login: str = node.whois(node.ip())["UserProfile"]["LoginName"]
    return login


def start_tsnet(
    net: Tailnet, tmp: Path, hostname: str, *, key: str | None = "tskey-test",
    config: str = "", tsnet: str = "", state_dir: Path | None = None,
    command: list[str] | None = None, base_env: dict[str, str] | None = None,
) -> RunningServer:  # fmt: skip
    """tailagent serve --tsnet on the test tailnet, with no tailscaled of its own.
    `config` holds other tables; `tsnet` more lines of the [tsnet] table."""
    path = tmp / f"{hostname}.toml"
    path.write_text(
        f'{config}\n[tsnet]\nenabled = true\nhostname = "{hostname}"\n'
        f'control_url = "{net.url}"\n{tsnet}\n'
    )
    env = {k: v for k, v in (base_env or os.environ).items() if k != "TS_AUTHKEY"}
    env.update(net.node_env())
    if key is not None:
        env["TS_AUTHKEY"] = key
    return start_server(
        tmp, "--config", str(path), "--tailscale-socket", str(tmp / "no-tailscaled.sock"),
        state_dir=state_dir, env=env, command=command,
    )  # fmt: skip


@pytest.fixture(scope="module")
def agent(tailnet: Tailnet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("tsagent")
    caller = login_of(tailnet.nodes["callerbox"])
    config = (
        f'[access]\nallowed_logins = ["{caller}"]\ncapability = "{CAPABILITY}"\n'
        "[push]\nattempts = 2\nretry_delay = 0.05\n"
    )
    server = start_tsnet(tailnet, tmp, "tsagent", config=config)
    yield server
    server.stop()


def dns_name(hostname: str) -> str:
    return f"{hostname}.tail.test"


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def post(node: Node, url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    with httpx.Client(proxy=node.proxy, timeout=30) as http:
        return http.post(url, json=body, headers={"A2A-Version": "1.0", **headers})


def joined_ip(server: RunningServer) -> str:
    line = next(ln for ln in server.log().splitlines() if "joined tailnet" in ln)
    return line.split("(", 1)[1].split(",", 1)[0]


def test_a_caller_reaches_the_node_by_name_and_address_and_whois_names_it(
    tailnet: Tailnet, agent: RunningServer
) -> None:
    caller = tailnet.nodes["callerbox"]
    login = login_of(caller)
    for url in (f"http://{dns_name('tsagent')}/", f"http://{joined_ip(agent)}/"):
        response = send(caller, url, "hello through tsnet")
        assert response.status_code == 200, response.text
        task = response.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert f"user:{login} (tailnet connection)" in agent.last_access_line()
    # The task is the caller's: it lists it.
    listed = post(caller, f"http://{dns_name('tsagent')}/", rpc("ListTasks", {}))
    assert task["id"] in [t["id"] for t in listed.json()["result"]["tasks"]]
    with httpx.Client(timeout=10) as http:
        card = http.get(agent.url + "/.well-known/agent-card.json").json()
    assert card["supportedInterfaces"][0]["url"].startswith(f"http://{dns_name('tsagent')}")


def open_the_desk_by_short_name(proxy: str, login: str, device: str) -> None:
    """A browser on the caller's node types the agent's short name, sees itself named by
    whois with no sign-in, and sends a task from the page. Run in a thread of its own:
    Playwright's sync API marks its thread's event loop as running between calls (see
    microsoft/playwright-pytest#167), which would stop the async tests that follow."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_context(proxy={"server": proxy}).new_page()
            page.goto("http://tsagent/")  # what people type: the short name and the root
            assert page.url == "http://tsagent/desk/"
            expect(page.locator(".viewer")).to_have_text(f"{login} from {device}")
            expect(page.locator("#rows")).to_be_visible()
            page.fill("#text", "over the tailnet")
            page.click("form.send button")
            page.wait_for_url(re.compile(r"http://tsagent/desk/tasks/[0-9a-f-]+$"))
            expect(page.locator(".answer")).to_contain_text("echo: over the tailnet", timeout=5000)
        finally:
            browser.close()


def test_a_browser_on_the_callers_node_opens_the_desk_by_short_name_with_no_sign_in(
    tailnet: Tailnet, agent: RunningServer
) -> None:
    """The caller node's outbound proxy stands for its device's network: Chromium reaches
    the embedded node by its short MagicDNS name, which the request's Host then carries."""
    caller = tailnet.nodes["callerbox"]
    login = login_of(caller)
    device = caller.whois(caller.ip())["Node"]["Name"].split(".")[0]
    with ThreadPoolExecutor(1) as worker:
        worker.submit(open_the_desk_by_short_name, caller.proxy, login, device).result(60)
    sent = f"user:{login} (tailnet connection) POST /desk/tasks -> 303"
    assert sent in agent.log(), agent.log()[-3000:]


def test_a_local_process_forging_headers_is_a_local_caller(
    tailnet: Tailnet, agent: RunningServer
) -> None:
    """No tailscaled serves this box, so no X-Forwarded-For counts, even from root."""
    caller = tailnet.nodes["callerbox"]
    forged = {"X-Forwarded-For": caller.ip(), "Tailscale-User-Login": login_of(caller),
              "A2A-Version": "1.0"}  # fmt: skip
    with httpx.Client(timeout=10) as http:
        response = http.post(agent.url + "/", json=rpc("ListTasks", {}), headers=forged)
    assert response.status_code == 401, response.text
    assert f"local process (uid {os.getuid()}), X-Forwarded-For ignored" in agent.last_access_line()


def test_the_nodes_tags_and_a_grants_roles_reach_the_policy(
    tailnet: Tailnet, tmp_path: Path
) -> None:
    caller, ci = tailnet.nodes["callerbox"], tailnet.nodes["cibox"]
    config = f'[access]\nallowed_logins = ["{login_of(caller)}"]\ncapability = "{CAPABILITY}"\n'
    server = start_tsnet(
        tailnet, tmp_path, "taggedagent", config=config, tsnet='advertise_tags = ["tag:agent"]'
    )
    url = f"http://{dns_name('taggedagent')}/"
    try:
        # The node is tag:agent on the tailnet, apart from whoever runs the box.
        assert caller.whois(joined_ip(server))["Node"]["Tags"] == ["tag:agent"]
        refused = send(ci, url, "tagged, no grant")
        assert refused.status_code == 403
        assert "access.allowed_tags" in refusal(refused.json())[1]
        tailnet.grant({CAPABILITY: [{"role": "caller"}]})
        try:
            deadline = time.monotonic() + 15  # until the embedded node has the new netmap
            while (asked := send(ci, url, "ask:grant")).status_code == 403:
                assert time.monotonic() < deadline, server.log()[-3000:]
                time.sleep(0.5)
            assert asked.status_code == 200, asked.text
            task = asked.json()["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            assert "tags:tag:ci (tailnet connection)" in server.last_access_line()
            answer = {"messageId": f"a-{time.monotonic_ns()}", "role": "ROLE_USER",
                      "taskId": task["id"], "parts": [{"text": "yes"}]}  # fmt: skip
            denied = post(ci, url, rpc("SendMessage", {"message": answer}))
            assert "approver" in denied.text, denied.text
        finally:
            tailnet.grant({})
    finally:
        server.stop()


async def test_a_permission_prompt_answered_across_the_tailnet(
    tailnet: Tailnet, agent: RunningServer
) -> None:
    caller = tailnet.nodes["callerbox"]
    async with httpx.AsyncClient(proxy=caller.proxy, headers={"A2A-Version": "1.0"},
                                 timeout=30) as http:  # fmt: skip
        client = await create_client(
            f"http://{dns_name('tsagent')}", ClientConfig(httpx_client=http)
        )
        ask = SendMessageRequest(message=user_message("ask:tsnet"))
        events = [e async for e in client.send_message(ask)]
        task = events[0].task
        assert events[-1].status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        answer = SendMessageRequest(message=user_message("yes", task_id=task.id))
        done = [e async for e in client.send_message(answer)]
        assert done[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        await client.close()
    row = next(r for r in audit_rows(agent) if r["task_id"] == task.id)
    assert row["decision"] == "allow"
    assert row["answered_by"].startswith(f"user:{login_of(caller)}")


@contextlib.asynccontextmanager
async def webhook() -> AsyncIterator[tuple[int, asyncio.Queue[bytes]]]:
    """A webhook on this machine's loopback; the caller's tailscaled (userspace
    networking) forwards tailnet connections to its port there."""
    received: asyncio.Queue[bytes] = asyncio.Queue()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        received.put_nowait(await request_body(receive))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    config, port = loopback_config()
    stop = asyncio.Event()
    serving = asyncio.create_task(serve(app, config, shutdown_trigger=stop.wait))  # type: ignore[arg-type]
    try:
        yield port, received
    finally:
        stop.set()
        await serving


async def test_push_goes_through_the_node_to_a_webhook_on_the_callers_node(
    tailnet: Tailnet, agent: RunningServer
) -> None:
    caller = tailnet.nodes["callerbox"]
    async with webhook() as (port, received):
        push = TaskPushNotificationConfig(url=f"http://callerbox.tail.test:{port}/hook", token="t")
        request = SendMessageRequest(
            message=user_message("pushed"),
            configuration=SendMessageConfiguration(task_push_notification_config=push),
        )
        async with httpx.AsyncClient(proxy=caller.proxy, headers={"A2A-Version": "1.0"},
                                     timeout=30) as http:  # fmt: skip
            client = await create_client(
                f"http://{dns_name('tsagent')}", ClientConfig(httpx_client=http)
            )
            [e async for e in client.send_message(request)]
            await client.close()
        async with asyncio.timeout(10):
            while b'"TASK_STATE_COMPLETED"' not in await received.get():
                pass
    assert "push for task" not in agent.log()  # no refusal, no failed delivery


def listening_addresses(pid: int, protocol: str = "tcp") -> set[str]:
    """The addresses the process's TCP sockets listen on (or its UDP sockets are bound
    to), as the kernel lists them (/proc/net/tcp and tcp6, state 0A; udp and udp6,
    state 07), matched to the process's socket inodes."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    listening = "0A" if protocol == "tcp" else "07"
    for table, width in ((protocol, 4), (f"{protocol}6", 16)):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != listening or inode not in inodes:
                continue
            raw, port = local.split(":")
            # The kernel prints each 32-bit word of the address in host (little-endian) order.
            words = [bytes.fromhex(raw[i : i + 8])[::-1] for i in range(0, 2 * width, 8)]
            address = ipaddress.ip_address(b"".join(words))
            found.add(f"{address}:{int(port, 16)}")
    return found


def test_the_node_listens_on_loopback_only(agent: RunningServer) -> None:
    """The embedded node's traffic is userspace: nothing of it needs a port on the box's
    own interfaces. Tailscale's peerAPI once took one on all of them (0.0.0.0)."""
    addresses = listening_addresses(agent.process.pid)
    assert addresses, "the server listens somewhere"
    for address in addresses:
        host = address.rsplit(":", 1)[0]
        assert ipaddress.ip_address(host).is_loopback, f"listening on {address}"


def test_peers_from_the_callers_box_find_the_embedded_node(
    tailnet: Tailnet, agent: RunningServer, tmp_path: Path
) -> None:
    rows = {r["peer"]: r for r in peers_seen_from(tailnet.nodes["callerbox"], tmp_path / "k")}
    assert rows[dns_name("tsagent")]["signature"] == "valid (key from jku, not pinned)"


def test_the_cli_on_the_agents_box_reaches_the_tailnet_through_the_node(
    agent: RunningServer, tmp_path: Path
) -> None:
    """No tailscaled on this box: `card` and `peers` go through the running server's node
    to a tailagent on the caller's node (reached there by userspace networking)."""
    port = free_port()
    other = start_server(
        tmp_path, "--public-url", f"http://callerbox.tail.test:{port}",
        listen=f"127.0.0.1:{port}", state_dir=tmp_path / "other",
    )  # fmt: skip
    env = {**os.environ, "TAILAGENT_KNOWN_AGENTS": str(tmp_path / "known.json")}
    env.pop("HTTP_PROXY", None)
    try:
        card = cli_run(
            [sys.executable, "-m", "tailagent", "card", f"http://callerbox.tail.test:{port}",
             "--state-dir", str(agent.state_dir)],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        assert card.returncode == 0, card.stdout + card.stderr
        assert "signature: valid" in card.stdout
        peers = cli_run(
            [sys.executable, "-m", "tailagent", "peers", "--json", "--scheme", "http",
             "--port", str(port), "--state-dir", str(agent.state_dir)],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip
        assert peers.returncode == 0, peers.stderr
        assert "callerbox.tail.test" in [json.loads(r)["peer"] for r in peers.stdout.splitlines()]
    finally:
        other.stop()


def doctor_of(server: RunningServer, *extra: str) -> str:
    """`tailagent doctor --tsnet` of the running server's state dir: what it prints."""
    doctor = cli_run(
        [sys.executable, "-m", "tailagent", "doctor", "--tsnet", "--agent", "echo",
         "--listen", server.url.removeprefix("http://"), "--state-dir", str(server.state_dir),
         *extra],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return doctor.stdout


def test_doctor_reports_the_running_node(agent: RunningServer) -> None:
    said = doctor_of(agent)
    assert "✗" not in said, said
    node = next(line for line in said.splitlines() if "tsnet node" in line)
    assert f"✓ tsnet node: Running as {dns_name('tsagent')}" in node
    assert "plain HTTP" in node  # the test control gives no certificates
    metrics = httpx.get(agent.url + "/metrics", headers={"Authorization": f"Bearer {agent.token}"})
    assert "tailagent_tsnet_node_info{" in metrics.text
    assert 'state="Running"' in metrics.text


def udp_ports(server: RunningServer) -> set[int]:
    return {int(a.rsplit(":", 1)[1]) for a in listening_addresses(server.process.pid, "udp")}


def test_a_restart_keeps_the_node_without_a_key(tailnet: Tailnet, tmp_path: Path) -> None:
    """The node key, and the UDP port its WireGuard is reached on: a peer goes on sending
    to the address it checked before the restart (tailnet/tsnet/node.py, kept_port)."""
    first = start_tsnet(tailnet, tmp_path, "restarted")
    try:
        ip = joined_ip(first)
        port = int((first.state_dir / "tsnet" / "udp-port").read_text())
        assert port in udp_ports(first), (port, udp_ports(first))
    finally:
        assert first.stop() == 0
    again = start_tsnet(tailnet, tmp_path, "restarted", key=None, state_dir=first.state_dir)
    try:
        assert port in udp_ports(again), (port, udp_ports(again))
        assert joined_ip(again) == ip
        assert "key from the stored node state" in again.log()
        assert f"serving http://{dns_name('restarted')}" in again.log()
    finally:
        again.stop()


def test_an_ephemeral_node_logs_out_at_stop(tailnet: Tailnet, tmp_path: Path) -> None:
    """testcontrol neither drops a node that logs out nor asks a keyless one to log in,
    so the logout shows as the node key being gone: the same state dir, started again
    without a key, registers as a new node (a new address), where a plain restart
    keeps its node (test_a_restart_keeps_the_node_without_a_key)."""
    first = start_tsnet(tailnet, tmp_path, "ephemeral", tsnet="ephemeral = true")
    ip = joined_ip(first)
    assert first.stop() == 0
    assert "the ephemeral node logged out and left the tailnet" in first.log()
    again = start_tsnet(tailnet, tmp_path, "ephemeral", key=None, state_dir=first.state_dir)
    try:
        assert joined_ip(again) != ip
    finally:
        again.stop()


SERVICE_VIP = "100.127.0.3"
SERVICE_URL = "http://agents.tail.test/"


def peer_key(caller: Node, hostname: str) -> str:
    """The node key of the peer `hostname`, as `caller` sees it."""
    peers = json.loads(caller.tailscale("status", "--json"))["Peer"].values()
    return str(next(p["PublicKey"] for p in peers if p["HostName"] == hostname))


@contextlib.contextmanager
def hosting(tailnet: Tailnet, tmp_path: Path, hostname: str) -> Iterator[RunningServer]:
    """A node `hostname` hosting `svc:agents`, approved once its start said it was not,
    and called once through the service's name by the caller's node (its person
    allowed). Each test's node has a name of its own: the service is routed to a node
    found by its name, and an earlier test's node keeps its name while offline."""
    caller = tailnet.nodes["callerbox"]
    login = login_of(caller)
    config = f'tailnet_service = "svc:agents"\n[access]\nallowed_logins = ["{login}"]\n'
    server = start_tsnet(tailnet, tmp_path, hostname, config=config,
                         tsnet='advertise_tags = ["tag:agent"]')  # fmt: skip
    try:
        assert "svc:agents is advertised but not approved for this node yet" in server.log()
        assert "hosting svc:agents as http://agents.tail.test" in server.log()
        assert "✗ service: svc:agents: not approved" in doctor_of(server, "--service", "svc:agents")
        key = peer_key(caller, hostname)
        body = {"name": "svc:agents", "vip": SERVICE_VIP, "hosts": [key], "route": key}
        approved = httpx.post(tailnet.url + "/testctl/services", json=body, timeout=10)
        assert approved.text == "ok\n", approved.text
        said = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hello"}]}
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(httpx.HTTPError):
                sent = post(caller, SERVICE_URL, rpc("SendMessage", {"message": said}))
                break
            assert time.monotonic() < deadline, "the service's name never reached the node"
            time.sleep(0.2)
        assert sent.status_code == 200, sent.text
        assert sent.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        line = server.last_access_line()
        assert f"user:{login}" in line and "SendMessage" in line, line
        yield server
    finally:
        server.stop()


def test_the_node_hosts_a_tailscale_service_and_whois_names_its_callers(
    tailnet: Tailnet, tmp_path: Path
) -> None:
    """`serve --tsnet --service svc:agents`: the node hosts the service itself (tsnet's
    ListenService, no tailscaled). A caller reaching the service's name is named by
    whois from the PROXY header the node's own serve writes, never from a header; the
    card names the service's URL, and the node's own name still serves (its siblings'
    way in). Until control approves the node for the service, the start says so."""
    caller = tailnet.nodes["callerbox"]
    with hosting(tailnet, tmp_path, "svchost") as server:
        with httpx.Client(proxy=caller.proxy, timeout=30) as http:
            card = http.get(SERVICE_URL + ".well-known/agent-card.json").json()
            own = http.get("http://svchost.tail.test/.well-known/agent-card.json").json()
        assert card["supportedInterfaces"][0]["url"].startswith("http://agents.tail.test")
        assert own["supportedInterfaces"][0]["url"].startswith("http://svchost.tail.test")
        said = doctor_of(server, "--service", "svc:agents")
        assert "✓ service: svc:agents: tagged, approved, advertised, served" in said, said


# Connects to a loopback address, writes a PROXY header naming a tailnet address and an
# A2A call after it, and prints what came back (or why not).
FORGE = """
import json, socket, sys
where, source = sys.argv[1], sys.argv[2]
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":
    {"messageId": "forged", "role": "ROLE_USER", "parts": [{"text": "forged"}]}}})
head = f"PROXY TCP4 {source} 100.127.0.3 40000 80\\r\\n"
call = ("POST / HTTP/1.1\\r\\nHost: agents.tail.test\\r\\n"
        "Content-Type: application/json\\r\\nA2A-Version: 1.0\\r\\n"
        f"Content-Length: {len(body)}\\r\\nConnection: close\\r\\n\\r\\n{body}")
host, _, port = where.rpartition(":")
got = b""
try:
    s = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
    s.sendall((head + call).encode())
    while chunk := s.recv(65536):
        got += chunk
except ConnectionResetError:
    pass
print(got.decode(errors="replace") or "closed unanswered")
"""


def forged(where: str, source: str, as_user: str) -> str:
    command = [sys.executable, "-c", FORGE, where, source]
    if as_user != "root":
        command = ["runuser", "-u", as_user, "--", "/usr/bin/python3", "-c", FORGE, where, source]
    done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    return done.stdout + done.stderr


def test_a_local_process_forging_the_service_s_proxy_header_is_nobody(
    tailnet: Tailnet, tmp_path: Path
) -> None:
    """tsnet hands a service's connections to a TCP port on the box's loopback, with a
    PROXY header naming the caller: any local user could connect there and name the
    person of their choice. The node believes only connections its own process made.
    A local process (root, and `nobody`) writing a header that names the allowed
    caller's address is answered nothing on every loopback port the server listens on
    but its own listener and the node's LocalAPI, and no call is logged for it."""
    caller_ip = tailnet.nodes["callerbox"].ip()
    with hosting(tailnet, tmp_path, "forgedhost") as server:
        client = json.loads((server.state_dir / "tsnet" / "client.json").read_text())
        own = {server.url.removeprefix("http://"), client["localapi"]}
        ports = sorted(listening_addresses(server.process.pid) - own)
        assert ports, listening_addresses(server.process.pid)
        for user in ("root", "nobody"):
            for address in ports:
                said = forged(address, caller_ip, user)
                assert '"result"' not in said and "forged" not in said, (user, address, said)
                assert "closed unanswered" in said, (user, address, said)
        assert "from another process" in (server.state_dir / "tsnet" / "node.log").read_text()
        lines = [line for line in server.log().splitlines() if "tailagent.access:" in line]
        assert sum("SendMessage" in line and "user:" in line for line in lines) == 1, lines


def test_an_untagged_node_cannot_host_a_service_and_is_told_how(
    tailnet: Tailnet, tmp_path: Path
) -> None:
    control = (
        f'tailnet_service = "svc:agents"\n[tsnet]\ncontrol_url = "{tailnet.url}"\n'
        'hostname = "untagged"\n'
    )
    code, line, _ = failed_start(tmp_path, control, TS_AUTHKEY="tskey-test", **tailnet.node_env())
    assert code == 1 and "hosted only by a tagged node" in line, line
    assert "tsnet.advertise_tags" in line, line


def failed_start(tmp: Path, config: str, *extra: str, **env: str) -> tuple[int, str, float]:
    """A start that must fail, on a state dir of its own unless `extra` names one (the
    default is the user's: a `tailagent serve` of theirs would fail it for another reason)."""
    path = tmp / f"bad-{time.monotonic_ns()}.toml"
    path.write_text(config)
    state = [] if "--state-dir" in extra else ["--state-dir", str(tmp / f"state-{path.stem}")]
    started = time.monotonic()
    result = cli_run(
        [sys.executable, "-m", "tailagent", "serve", "--tsnet", "--agent", "echo",
         "--listen", "127.0.0.1:0", "--config", str(path), "--cwd", str(tmp), *state, *extra],
        capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "TS_AUTHKEY"} | env,
    )  # fmt: skip
    return result.returncode, result.stderr.strip().splitlines()[-1], time.monotonic() - started


def test_bad_input_is_one_line_and_a_non_zero_exit_within_seconds(
    tailnet: Tailnet, tmp_path: Path
) -> None:
    strict = Tailnet(require_authkey="tskey-the-right-one").start()
    try:
        control = f'[tsnet]\ncontrol_url = "{strict.url}"\n'
        code, line, took = failed_start(
            tmp_path, control, "--state-dir", str(tmp_path / "k"),
            TS_AUTHKEY="tskey-wrong", **strict.node_env(),
        )  # fmt: skip
        assert code == 1 and took < 15
        assert line.startswith("tailagent: the control server refused the node's key"), line
        assert "TS_AUTHKEY" in line
    finally:
        strict.stop()
    down = f'[tsnet]\ncontrol_url = "http://127.0.0.1:{free_port()}"\n'
    code, line, took = failed_start(tmp_path, down, "--state-dir", str(tmp_path / "d"),
                                    TS_AUTHKEY="tskey-test")  # fmt: skip
    assert code == 1 and took < 15
    assert "cannot reach the control server" in line and "tsnet.control_url" in line, line
    (tmp_path / "a-file").write_text("")
    control = f'[tsnet]\ncontrol_url = "{tailnet.url}"\n'
    code, line, _ = failed_start(tmp_path, control, "--state-dir", str(tmp_path / "a-file" / "s"),
                                 TS_AUTHKEY="tskey-test")  # fmt: skip
    assert code == 1 and "--state-dir" in line, line
    code, line, _ = failed_start(tmp_path, control, "--tailnet")
    assert code == 2 and "pick one" in line, line
    code, line, _ = failed_start(
        tmp_path, control, TAILAGENT_TSNET_LIBRARY=str(tmp_path / "missing.so")
    )
    assert code == 1 and "no embedded tailnet node" in line and "build.py" in line, line


# --- what pip shows of the node's build ---------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
PIP_MAJOR = int(subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True,
                               text=True).stdout.split()[1].split(".")[0])  # fmt: skip


def pip_wheel(tmp: Path, env: dict[str, str], terminal: bool) -> str:
    """pip building tailagent from a copy of this checkout, as a person installing it
    sees it: with a terminal (`script` gives it one) or none (a CI log). Build
    isolation fetches setuptools, as `pip install -e .` does."""
    source = tmp / "src"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                             check=True).stdout.decode().split("\0")  # fmt: skip
    for name in (n for n in tracked if n and (ROOT / n).is_file()):
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp / "out"), str(source)]
    if terminal:
        argv = ["script", "-qec", subprocess.list2cmdline(argv), "/dev/null"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env,
                          stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.mark.skipif(shutil.which("go") is None, reason="Go is not installed: no node to build")
@pytest.mark.skipif(PIP_MAJOR < 26, reason="pip before 26 shows a build's warnings only with -v")
def test_pip_says_the_node_build_may_take_minutes_and_how_it_went(tmp_path: Path) -> None:
    without_go = {**os.environ, "PATH": "/usr/bin:/bin"}
    assert shutil.which("go", path=without_go["PATH"]) is None
    # Three builds of their own copies, at once: each mostly waits on pip and Go.
    with ThreadPoolExecutor(3) as pool:
        plain_build = pool.submit(pip_wheel, tmp_path / "log", dict(os.environ), False)
        shown_build = pool.submit(pip_wheel, tmp_path / "tty", dict(os.environ), True)
        missing_build = pool.submit(pip_wheel, tmp_path / "nogo", without_go, False)
        plain, shown, missing = plain_build.result(), shown_build.result(), missing_build.result()
    built = r"BuildBackendWarning: embedded tailnet node \(serve --tsnet\) built in \d+ s: \S+\.so"
    assert re.search(built, plain), plain
    starting = shown.index("tailagent: building the embedded tailnet node (serve --tsnet) with Go:"
                           " a first build takes a few minutes")  # fmt: skip
    assert starting < shown.index("tailagent: embedded tailnet node (serve --tsnet) built in")
    assert "BuildBackendWarning: no embedded tailnet node (serve --tsnet): Go is not installed: " \
           "install Go 1.26.6 or newer" in missing, missing  # fmt: skip
