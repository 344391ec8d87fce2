"""One tailnet name for several boxes (issue 58), first part: a Tailscale Service on the
test tailnet, with tailagent behind `tailscale serve --service` on two tagged boxes.

The control server of the suite approves the service on both hosts and routes its
virtual IP to one of them, as the real control plane does (tests/tailnet_control/
services.go); a caller's laptop reaches `agents.tail.test` and whichever box carries the
route answers, knowing the caller by whois. Moving the route is a failover, timed here.
"""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer, start_server
from tests.real_tailnet import DOMAIN, Node, Tailnet, module_tailnet
from tests.warm_start import PROGRAM, cli_run

SERVICE = "svc:agents"
VIP = "100.127.0.1"  # inside 100.64.0.0/10: a peer's address, no --accept-routes needed
URL = f"http://agents.{DOMAIN}/"
LAPTOP_LOGIN = "user-3@fake-control.example.net"  # testcontrol names users in join order
BOXES = ("box1", "box2")


@pytest.fixture(scope="module")
def tailnet() -> Iterator[Tailnet]:
    tagged = {"tags": ("tag:agents",)}
    nodes = {"box1": tagged, "box2": tagged, "laptop": {"proxy": True}}
    yield from module_tailnet(nodes, tags=("tag:ci", "tag:agents"))


def node_key(node: Node) -> str:
    return str(json.loads(node.tailscale("status", "--json"))["Self"]["PublicKey"])


def route_service(tailnet: Tailnet, hosts: list[Node], route: Node) -> None:
    """Approves the service on `hosts` and sends its VIP to `route`, as control does."""
    body = {"name": SERVICE, "vip": VIP, "hosts": [node_key(h) for h in hosts]}
    body["route"] = node_key(route)
    request = urllib.request.Request(
        tailnet.url + "/testctl/services", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.read() == b"ok\n"


@pytest.fixture(scope="module")
def servers(
    tailnet: Tailnet, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, RunningServer]]:
    """tailagent on each box, behind that box's `tailscale serve --service`."""
    boxes = [tailnet.nodes[name] for name in BOXES]
    route_service(tailnet, boxes, boxes[0])
    running: dict[str, RunningServer] = {}
    try:
        for box in boxes:
            tmp = tmp_path_factory.mktemp(box.name)
            config = tmp / "tailagent.toml"
            config.write_text(f'[access]\nallowed_logins = ["{LAPTOP_LOGIN}"]\n')
            server = start_server(
                tmp, "--config", str(config), "--tailscale-socket", str(box.socket),
                "--public-url", URL.rstrip("/"),
            )  # fmt: skip
            running[box.name] = server
            said = box.tailscale("serve", f"--service={SERVICE}", "--http=80", server.url)
            assert "approval" not in said, said  # the control approved it first
        yield running
    finally:
        for name, server in running.items():
            tailnet.nodes[name].tailscale("serve", "clear", SERVICE, check=False)
            server.stop()


def hello(http: httpx.Client) -> str:
    """A message to the service's name (a request that needs the caller known): the id
    of the task it made."""
    message = {"messageId": f"m-{time.monotonic_ns()}", "role": "ROLE_USER",
               "parts": [{"text": "hello through the service"}]}  # fmt: skip
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    response = http.post(URL, json=body, headers={"A2A-Version": "1.0"})
    response.raise_for_status()
    task = response.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    return str(task["id"])


def holds(server: RunningServer, task_id: str) -> bool:
    with sqlite3.connect(server.state_dir / "tailagent.db") as db:
        return db.execute("SELECT 1 FROM tasks WHERE id = ?", (task_id,)).fetchone() is not None


def answering_box(laptop: Node, servers: dict[str, RunningServer], within: float) -> str:
    """Which box answers a message to the service's name: the one whose store holds
    the task it made."""
    deadline = time.monotonic() + within
    with httpx.Client(proxy=laptop.proxy, timeout=5) as http:
        while True:
            try:
                task_id = hello(http)
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
                continue
            break
    (home,) = [name for name, server in servers.items() if holds(server, task_id)]
    return home


def test_the_service_name_reaches_the_box_with_the_route_as_the_caller(
    tailnet: Tailnet, servers: dict[str, RunningServer]
) -> None:
    laptop = tailnet.nodes["laptop"]
    assert answering_box(laptop, servers, within=30) == "box1"
    line = servers["box1"].last_access_line()
    assert f"user:{LAPTOP_LOGIN} (tailscale serve) POST / SendMessage -> 200" in line, line


def test_the_route_moved_sends_callers_to_the_other_box(
    tailnet: Tailnet, servers: dict[str, RunningServer], tmp_path: Path
) -> None:
    laptop = tailnet.nodes["laptop"]
    boxes = [tailnet.nodes[name] for name in BOXES]
    assert answering_box(laptop, servers, within=30) == "box1"
    moved = time.monotonic()
    route_service(tailnet, boxes, boxes[1])
    deadline = moved + 30
    while answering_box(laptop, servers, within=30) != "box2":
        assert time.monotonic() < deadline, "the laptop still reaches box1 after 30 s"
        time.sleep(0.05)
    took = time.monotonic() - moved
    (tmp_path / "failover.txt").write_text(f"{took:.3f}\n")
    print(f"\nthe route moved: callers reach box2 after {took:.2f} s")
    line = servers["box2"].last_access_line()
    assert f"user:{LAPTOP_LOGIN} (tailscale serve) POST / SendMessage -> 200" in line, line
    route_service(tailnet, boxes, boxes[0])  # as the module found it


def serve_config(node: Node) -> dict[str, Any]:
    return dict(json.loads(node.tailscale("serve", "status", "--json")))


def advertised(node: Node) -> list[str]:
    return list(json.loads(node.tailscale("debug", "prefs")).get("AdvertiseServices") or [])


def test_tailagent_serves_the_service_itself_and_leaves_it_as_it_found_it(
    tailnet: Tailnet, servers: dict[str, RunningServer], tmp_path: Path
) -> None:
    """`serve --service svc:agents`: tailagent writes its own entry under the service
    (beside the one made by hand on port 80), advertises the service, names the
    service's URL on its card, and at stop takes out its entry only; the service stays
    advertised while that other entry serves it."""
    box = tailnet.nodes["box1"]
    server = start_server(tmp_path, "--service", SERVICE, "--tailnet-port", "8443",
                          "--tailscale-socket", str(box.socket))  # fmt: skip
    try:
        site = serve_config(box)["Services"][SERVICE]["Web"][f"agents.{DOMAIN}:8443"]
        assert site["Handlers"]["/"]["Proxy"] == server.url
        # The box's own name too: where its siblings carry requests for its work.
        own = serve_config(box)["Web"][f"box1.{DOMAIN}:8443"]
        assert own["Handlers"]["/"]["Proxy"] == server.url
        assert SERVICE in advertised(box)
        card = httpx.get(server.url + "/.well-known/agent-card.json", timeout=10).json()
        assert card["supportedInterfaces"][0]["url"].startswith(f"https://agents.{DOMAIN}:8443")
        # Fetched by the box's own name, the card names that name.
        own_card = httpx.get(server.url + "/.well-known/agent-card.json", timeout=10,
                             headers={"Host": f"box1.{DOMAIN}"}).json()  # fmt: skip
        assert own_card["supportedInterfaces"][0]["url"] == f"https://box1.{DOMAIN}:8443"
        assert "not approved" not in server.log()
        listen = server.url.removeprefix("http://")
        assert doctor_service(box, "--listen", listen, "--state-dir", str(server.state_dir)) == {
            "ok": True, "detail": f"{SERVICE}: tagged, approved, advertised, served"}  # fmt: skip
    finally:
        assert server.stop() == 0
    web = serve_config(box)["Services"][SERVICE]["Web"]
    assert f"agents.{DOMAIN}:8443" not in web and f"agents.{DOMAIN}:80" in web
    assert f"box1.{DOMAIN}:8443" not in (serve_config(box).get("Web") or {})
    assert SERVICE in advertised(box)


def test_a_service_not_approved_for_the_box_is_said_at_start(
    tailnet: Tailnet, tmp_path: Path
) -> None:
    box = tailnet.nodes["box2"]
    server = start_server(tmp_path, "--service", "svc:other", "--tailnet-port", "8443",
                          "--tailscale-socket", str(box.socket))  # fmt: skip
    try:
        assert "svc:other is advertised but not approved for this node yet" in server.log()
        assert "svc:other" in advertised(box)
    finally:
        assert server.stop() == 0
    assert "svc:other" not in advertised(box)
    assert "svc:other" not in (serve_config(box).get("Services") or {})


def test_an_untagged_box_cannot_host_a_service_and_is_told_how(
    tailnet: Tailnet, tmp_path: Path
) -> None:
    laptop = tailnet.nodes["laptop"]
    with pytest.raises(RuntimeError) as refused:
        start_server(tmp_path, "--service", SERVICE,
                     "--tailscale-socket", str(laptop.socket))  # fmt: skip
    assert "hosted only by a tagged node" in str(refused.value)
    assert "--advertise-tags" in str(refused.value)
    assert SERVICE not in advertised(laptop)


def doctor_service(node: Node, *args: str) -> dict[str, Any]:
    """`doctor`'s service line for `node` as the host of SERVICE."""
    argv = [*PROGRAM, "doctor", "--json", "--service", SERVICE,
            "--tailscale-socket", str(node.socket), *args]  # fmt: skip
    done = cli_run(argv, capture_output=True, text=True, timeout=60)
    (line,) = [c for c in json.loads(done.stdout) if c["name"] == "service"]
    return {k: line[k] for k in ("ok", "detail")} | ({"fix": line["fix"]} if not line["ok"] else {})


def test_doctor_says_what_an_untagged_box_lacks_to_host_the_service(
    tailnet: Tailnet, tmp_path: Path
) -> None:
    said = doctor_service(tailnet.nodes["laptop"], "--state-dir", str(tmp_path))
    assert said["ok"] is False
    assert said["detail"].startswith(f"{SERVICE}: not tagged, not approved, not advertised, ")
    assert "--advertise-tags" in said["fix"] and "admin console" in said["fix"]
