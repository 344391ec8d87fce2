"""`serve --tsnet`: tailagent as a tailnet node of its own, with no tailscaled on its side.

The suite's real tailnet (our control server, Tailscale's own tailscaled for the other
nodes) hosts a tailagent that joins through the embedded node; callers on tailscaled
nodes reach it by name and address, and everything about identity holds as it does
through tailscaled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
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

from tests.a2a_helpers import user_message
from tests.conftest import RunningServer, start_server
from tests.real_tailnet import Node, Tailnet, Unavailable, build
from tests.tailnet import free_port
from tests.webhook import loopback_config, request_body

CAPABILITY = "example.com/cap/tailagent"
LIBRARY = Path(__file__).resolve().parent.parent / "tailagent" / "tsnet" / "libtailagent_tsnet.so"


@pytest.fixture(scope="module")
def tailnet() -> Iterator[Tailnet]:
    try:
        build()
    except Unavailable as exc:
        pytest.skip(str(exc))
    if not LIBRARY.exists() and "TAILAGENT_TSNET_LIBRARY" not in os.environ:
        if shutil.which("go") is None:
            pytest.skip("Go is not installed, so the embedded node was not built")
        pytest.fail(f"Go is here but the embedded node is not built: {LIBRARY} is missing")
    net = Tailnet(tags=("tag:ci", "tag:agent")).start()
    try:
        net.add_node("callerbox", proxy=True)
        net.add_node("cibox", proxy=True, tags=("tag:ci",))
        yield net
    finally:
        net.stop()


def login_of(node: Node) -> str:
    login: str = node.whois(node.ip())["UserProfile"]["LoginName"]
    return login


def start_tsnet(
    net: Tailnet, tmp: Path, hostname: str, *, key: str | None = "tskey-test",
    config: str = "", tsnet: str = "", state_dir: Path | None = None,
) -> RunningServer:  # fmt: skip
    """tailagent serve --tsnet on the test tailnet, with no tailscaled of its own.
    `config` holds other tables; `tsnet` more lines of the [tsnet] table."""
    path = tmp / f"{hostname}.toml"
    path.write_text(
        f'{config}\n[tsnet]\nenabled = true\nhostname = "{hostname}"\n'
        f'control_url = "{net.url}"\n{tsnet}\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "TS_AUTHKEY"}
    env.update(net.node_env())
    if key is not None:
        env["TS_AUTHKEY"] = key
    return start_server(
        tmp, "--config", str(path), "--tailscale-socket", str(tmp / "no-tailscaled.sock"),
        state_dir=state_dir, env=env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def agent(tailnet: Tailnet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("tsagent")
    caller = login_of(tailnet.nodes["callerbox"])
    config = (
        f'[access]\nallowed_logins = ["{caller}"]\ncapability = "{CAPABILITY}"\n'
        '[push]\nattempts = 2\nretry_delay = 0.05\n'
    )
    server = start_tsnet(tailnet, tmp, "tsagent", config=config)
    yield server
    server.stop()


def dns_name(hostname: str) -> str:
    return f"{hostname}.tail.test"


def last_access_line(server: RunningServer) -> str:
    time.sleep(0.1)
    return [line for line in server.log().splitlines() if "tailagent.access:" in line][-1]


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def message(text: str) -> dict[str, Any]:
    msg = {"messageId": f"m-{time.monotonic_ns()}", "role": "ROLE_USER", "parts": [{"text": text}]}
    return rpc("SendMessage", {"message": msg})


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
        response = post(caller, url, message("hello through tsnet"))
        assert response.status_code == 200, response.text
        task = response.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED"
        assert f"user:{login} (tailnet connection)" in last_access_line(agent)
    # The task is the caller's: it lists it; the local admin token sees it as the caller's.
    listed = post(caller, f"http://{dns_name('tsagent')}/", rpc("ListTasks", {}))
    assert task["id"] in [t["id"] for t in listed.json()["result"]["tasks"]]
    with httpx.Client(timeout=10) as http:
        card = http.get(agent.url + "/.well-known/agent-card.json").json()
    assert card["supportedInterfaces"][0]["url"].startswith(f"http://{dns_name('tsagent')}")


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
    assert "local process (uid 0), X-Forwarded-For ignored" in last_access_line(agent)


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
        refused = post(ci, url, message("tagged, no grant"))
        assert refused.status_code == 403
        assert "access.allowed_tags" in refused.json()["reason"]
        tailnet.grant({CAPABILITY: [{"role": "caller"}]})
        try:
            deadline = time.monotonic() + 15  # until the embedded node has the new netmap
            while (asked := post(ci, url, message("ask:grant"))).status_code == 403:
                assert time.monotonic() < deadline, server.log()[-3000:]
                time.sleep(0.5)
            assert asked.status_code == 200, asked.text
            task = asked.json()["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
            assert "tags:tag:ci (tailnet connection)" in last_access_line(server)
            answer = {"messageId": f"a-{time.monotonic_ns()}", "role": "ROLE_USER",
                      "taskId": task["id"], "parts": [{"text": "yes"}]}  # fmt: skip
            denied = post(ci, url, rpc("SendMessage", {"message": answer}))
            assert "approver" in denied.text, denied.text
        finally:
            tailnet.grant({})
    finally:
        server.stop()
