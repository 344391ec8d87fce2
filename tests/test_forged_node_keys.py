"""A hop's key is trusted only from the tailagent of the node that signed it (issue 55,
section 1): forgers on a node that B trusts, signing for alice or for B's owner with a
key set of their own served on another port of that node, are refused with words that
say so, and their key set is never fetched nor pinned.

Two real servers on loopback (tests/two_boxes.py), A on devbox-1 and B on devbox-2; the
proxy that plays the tailnet tells B every call comes from devbox-1, as any process on
devbox-1 would. The forgers there, both on devbox-1: another tailagent (with a key of its
own), on port 8931, and a bare local process serving a JWKS and a card on port 8932.

Then on the real tailnet (tests/real_tailnet.py, two nodes), the forgers of the issue's
"done when", each on boxa: a second local user (`nobody`, tests/key_forger.py), whose
key set on a port of boxa B's node does reach, refused by B for its key URL alone; and
A's own agent, fenced (the default sandbox), which never gets that far: its listener is
in the fence's own network, and the fence reaches neither B nor boxa's tailscaled."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailagent.card.keys import KEYS_FILE, KeyStore, SigningKey
from tailagent.delegation.chain import extend
from tailagent.delegation.node_keys import KNOWN_NODES_FILE
from tests.conftest import RunningServer, start_server
from tests.key_forger import KeySetServer
from tests.real_tailnet import Tailnet, module_tailnet
from tests.tailnet import OWNER, free_port, refusal, send_message
from tests.test_fence_network import BRIDGE
from tests.test_isolation import make_project
from tests.test_real_delegation import (
    Box,
    box_config,
    send_chain,
    serve_args,
    start_box,
    stop_box,
)
from tests.test_sandbox import HOSTILE
from tests.test_sandbox_nobody import PACKAGES, PYTHON, REPO, USER, as_nobody
from tests.two_boxes import A_NODE, ALICE, B_NODE, Boxes, port_of, start_boxes

JWKS = "/.well-known/jwks.json"
REFUSED = (
    f"a key set served by another process, another port or another user on {A_NODE} "
    "signs for no one"
)


class Forgers:
    """B, A, and the two forgers on devbox-1's other ports."""

    def __init__(self, tmp: Path) -> None:
        self.boxes: Boxes = start_boxes(tmp)
        self.other_user: RunningServer = start_server(
            tmp / "mallory", "--public-url", f"http://{A_NODE}:8931"
        )
        self.boxes.proxy.routes[f"{A_NODE}:8931"] = port_of(self.other_user)
        self.fenced_key = KeyStore(tmp / "fenced").init()
        self.process = KeySetServer(self.fenced_key.jwk, f"http://{A_NODE}:8932")
        self.boxes.proxy.routes[f"{A_NODE}:8932"] = self.process.server_address[1]

    def stop(self) -> None:
        self.process.shutdown()
        self.process.server_close()
        self.other_user.stop()
        self.boxes.stop()


@pytest.fixture(scope="module")
def forgers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forgers]:
    made = Forgers(tmp_path_factory.mktemp("forgers"))
    yield made
    made.stop()


def hop(key: SigningKey, jku: str, person: str = ALICE) -> list[str]:
    """A hop of devbox-1's, for `person`, addressed to B, signed with `key`."""
    return extend(
        [], key, jku, person=person, device="laptop", node=A_NODE, audience=B_NODE,
        task_id="task-on-a", context_id="ctx-on-a",
    )  # fmt: skip


def to_b(boxes: Boxes, tokens: list[str], body: dict[str, Any]) -> tuple[int, str]:
    """The request sent to B through the tailnet, from devbox-1: status, and the
    refusal's words (or the body)."""
    headers = {"A2A-Version": "1.0", "A2A-Actor-Chain": ",".join(tokens)}
    with httpx.Client(proxy=boxes.proxy.url, timeout=30) as http:
        response = http.post(f"http://{B_NODE}/", json=body, headers=headers)
    reply = response.json()
    return response.status_code, str(reply.get("error", {}).get("message", reply))


def pinned(boxes: Boxes) -> dict[str, Any]:
    path = boxes.b.state_dir / KNOWN_NODES_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def forged_hops(forgers: Forgers, person: str) -> list[list[str]]:
    """Each forger's hop for `person`: the other user's tailagent and the local
    process, each naming its own key set; and one naming a key set on devbox-1's
    tailagent port, but at another path."""
    other_user = KeyStore(forgers.other_user.state_dir).current()
    return [
        hop(other_user, f"http://{A_NODE}:8931{JWKS}", person),
        hop(forgers.fenced_key, f"http://{A_NODE}:8932{JWKS}", person),
        hop(forgers.fenced_key, f"http://{A_NODE}/mallory{JWKS}", person),
    ]


def assert_all_refused(forgers: Forgers, person: str) -> None:
    for tokens in forged_hops(forgers, person):
        status, said = to_b(forgers.boxes, tokens, send_message(f"as {person}"))
        assert status == 403 and said.startswith("actor chain refused: hop 1 ("), said
        assert REFUSED in said, said
    listing = {"jsonrpc": "2.0", "id": 2, "method": "ListTasks", "params": {}}
    status, said = to_b(forgers.boxes, forged_hops(forgers, person)[0], listing)
    assert status == 403 and REFUSED in said, said


def test_a_hop_signed_on_another_port_of_a_trusted_node_is_refused(forgers: Forgers) -> None:
    boxes = forgers.boxes
    # Before B has met devbox-1: nothing of the forgers' is fetched, nothing pinned.
    assert_all_refused(forgers, ALICE)
    assert pinned(boxes) == {}
    # devbox-1's own tailagent signs for alice: B reads its card at its own URL, pins
    # its key under the node's name, and takes the work.
    honest = KeyStore(boxes.a.state_dir).current()
    status, said = to_b(boxes, hop(honest, f"http://{A_NODE}{JWKS}"), send_message("honest"))
    assert status == 200, said
    assert {n: (e["card"], e["jwk"]["kid"]) for n, e in pinned(boxes).items()} == {
        A_NODE: (f"http://{A_NODE}", honest.kid)
    }
    # With devbox-1 pinned, the same forgeries still fail, and the pin is unchanged.
    assert_all_refused(forgers, ALICE)
    assert list(pinned(boxes)) == [A_NODE]
    # A forger's key named under the tailagent's own key URL is not in its key set.
    status, said = to_b(boxes, hop(forgers.fenced_key, f"http://{A_NODE}{JWKS}"), send_message())
    assert status == 403 and f"no key {forgers.fenced_key.kid} in" in said, said
    assert forgers.process.asked == []


def test_the_same_forgery_naming_bs_owner_is_refused(forgers: Forgers) -> None:
    assert_all_refused(forgers, OWNER)
    assert forgers.process.asked == []


# On the real tailnet (tests/real_tailnet.py): boxa's and boxb's own tailscaled, A's agent
# the hostile one in its fence (the default sandbox), and a second local user on boxa.

FORGER = Path(__file__).parent / "key_forger.py"
VICTIM = "alice@example.com"  # whom B lets in: only the key check stands in the way


@dataclass
class RealBoxes:
    net: Tailnet
    a: Box
    b: Box

    def refused(self, port: int) -> str:
        """B's refusal of a hop naming a key set on `port` of boxa."""
        node = self.a.node.dns_name
        return (
            f"actor chain refused: hop 1 ({node}): bad signature (its key URL "
            f"http://{node}:{port}{JWKS} is not the key set of {node}'s tailagent, "
            f"{self.a.jku}, as its card at {self.a.url} declares: a key set served by another "
            f"process, another port or another user on {node} signs for no one)"
        )


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[Tailnet]:
    """boxa and boxb, each with its tailscaled's proxy: under a second to start."""
    yield from module_tailnet({"boxa": {"proxy": True}, "boxb": {"proxy": True}})


@pytest.fixture(scope="module")
def real(two_nodes: Tailnet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealBoxes]:
    """boxa's tailagent runs the hostile agent, fenced; boxb lets boxa hand it work for
    VICTIM."""
    b = start_box(two_nodes.nodes["boxb"], tmp_path_factory.mktemp("boxb"), [VICTIM],
                  {"allowed_nodes": ["boxa"]})  # fmt: skip
    node, tmp = two_nodes.nodes["boxa"], tmp_path_factory.mktemp("boxa")
    make_project(tmp / "workspace")
    config = tmp / "tailagent.toml"
    config.write_text(box_config(node, [], {}))
    listen = f"127.0.0.1:{free_port()}"
    hostile = ("--agent-command", f"{sys.executable} {HOSTILE}")
    server = start_server(tmp, *serve_args(node, config, "worktree"), *hostile, listen=listen)
    node.tailscale("serve", "--bg", "--http=80", server.url)
    a = Box(node, tmp, config, listen, server, "worktree")
    yield RealBoxes(two_nodes, a, b)
    stop_box(a)
    stop_box(b)


def real_hop(real: RealBoxes, key: SigningKey, jku: str) -> list[str]:
    return extend([], key, jku, person=VICTIM, device="laptop", node=real.a.node.dns_name,
                  audience=real.b.node.dns_name, task_id="t", context_id="c")  # fmt: skip


def from_b_node(real: RealBoxes, url: str) -> httpx.Response:
    """What B's node gets at `url`, through its own tailscaled (as B fetches a key set)."""
    with httpx.Client(proxy=real.b.node.proxy, timeout=30) as http:
        return http.get(url)


def test_a_second_local_user_on_a_serving_its_own_key_set_is_refused(real: RealBoxes) -> None:
    """`nobody` on boxa: cannot read A's signing key (the state dir is root's); its key set
    on a port of boxa is reachable from B's node, and still B refuses its hop, sent from
    boxa, for the key URL alone, fetching nothing and pinning nothing."""
    if (why := forger_cannot_run()) is not None:
        pytest.skip(why)
    a_node = real.a.node
    pythonpath = os.pathsep.join(map(str, (REPO, *PACKAGES)))
    argv = ["runuser", "-u", USER, "--", "env", "HOME=/tmp", f"PYTHONPATH={pythonpath}",
            str(PYTHON), str(FORGER), a_node.dns_name, real.b.node.dns_name, a_node.proxy,
            real.b.url + "/", VICTIM, str(real.a.server.state_dir / KEYS_FILE)]  # fmt: skip
    forger = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert forger.stdin is not None and forger.stdout is not None
    try:
        steal = json.loads(forger.stdout.readline())["steal"]
        assert steal.startswith("refused: PermissionError [Errno 13] Permission denied"), steal
        port = json.loads(forger.stdout.readline())["port"]
        forger.stdin.write("send\n")
        forger.stdin.flush()
        sent = json.loads(forger.stdout.readline())
        assert sent["status"] == 403, sent
        assert refusal(json.loads(sent["body"]))[1] == real.refused(port)
        # Not for want of reaching it: B's node gets the forger's key set at that port.
        served = from_b_node(real, f"http://{a_node.dns_name}:{port}{JWKS}")
        assert served.status_code == 200 and served.json()["keys"][0]["kid"], served.text
        forger.stdin.close()
        asked = json.loads(forger.stdout.readline())["asked"]
    finally:
        forger.wait(30)
    assert asked == [JWKS]  # the fetch just above; B asked nothing
    assert real_pins(real) == {}


def real_pins(real: RealBoxes) -> dict[str, Any]:
    path = real.b.server.state_dir / KNOWN_NODES_FILE
    return json.loads(path.read_text()) if path.exists() else {}


def forger_cannot_run() -> str | None:
    """Why `nobody` cannot run the forger here; None when it can."""
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        return "needs root and runuser, to run the forger as another user"
    theirs = as_nobody(str(PYTHON), "-c", "import sys; print('%d.%d' % sys.version_info[:2])")
    if theirs.stdout.strip() != f"{sys.version_info[0]}.{sys.version_info[1]}":
        return f"{PYTHON} as {USER} is not this Python ({theirs.stdout or theirs.stderr})"
    return None


def test_a_fenced_agent_on_a_neither_serves_on_the_node_nor_reaches_b(real: RealBoxes) -> None:
    """A's own agent, in its fence, tries to steal A's key, serve a key set on a port of
    boxa and send B a chain signed with it: each step fails at the fence, saying why,
    and nothing reaches B. Had the chain got out, B would refuse it as the other forgers'."""
    a_node, b_node = real.a.node, real.b.node
    port, tailscaled = free_port(), f"127.0.0.1:{a_node.proxy_port}"
    forged = ",".join(real_hop(real, KeyStore(real.a.tmp / "forged").init(),
                               f"http://{a_node.dns_name}:{port}{JWKS}"))  # fmt: skip
    b_ip = b_node.ip()
    sends = {
        "via the fence's proxy, by name": {"url": real.b.url + "/", "via": "", "chain": forged},
        "via the fence's proxy, by address": {"url": f"http://{b_ip}/", "via": "",
                                              "chain": forged},
        "via boxa's tailscaled": {"url": real.b.url + "/", "via": tailscaled,
                                  "chain": forged},
        "to boxa's tailscaled through the fence's proxy": {
            "url": f"http://{tailscaled}/", "via": BRIDGE, "chain": forged},
    }  # fmt: skip
    posts = {why: json.dumps(asked) for why, asked in sends.items()}
    steal = str(real.a.server.state_dir / KEYS_FILE)
    plan = {"read": [steal], "serve": [str(port)], "connect": [f"127.0.0.1:{port}", tailscaled],
            "post": list(posts.values())}  # fmt: skip
    before = b_access_lines(real)
    got = a_agent_does(real, plan)
    assert got.pop(f"read {steal}").startswith("refused: ENOENT"), got
    # It binds, and reaches its listener: in the fence's own network, not the node's.
    assert got.pop(f"serve {port}") == f"ok: serving on 0.0.0.0:{port}"
    assert got.pop(f"connect 127.0.0.1:{port}") == "ok: connected"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
    # B's node reaching that port of boxa reaches the node's loopback, where nothing
    # listens (tailscaled's proxy answers 502, as for any closed port).
    assert from_b_node(real, f"http://{a_node.dns_name}:{port}{JWKS}").status_code == 502
    # boxa's tailscaled proxy is not in the fence's network, and its own proxy refuses it.
    assert got.pop(f"connect {tailscaled}").startswith("refused: ECONNREFUSED"), got
    said = {why: got.pop(f"post {text}") for why, text in posts.items()}
    assert got == {}
    assert said["via boxa's tailscaled"].startswith("refused: ECONNREFUSED"), said
    assert said["to boxa's tailscaled through the fence's proxy"] == (
        f'refused: 403 loopback address refused: 127.0.0.1 (add "{tailscaled}" to '
        "sandbox.allow_hosts to allow it)"
    )
    assert said["via the fence's proxy, by address"] == (
        f'refused: 403 tailnet address refused: {b_ip} (add "{b_ip}:80" to '
        "sandbox.allow_hosts to allow it)"
    )
    # This machine has no MagicDNS; where it has, the name resolves to b_ip, refused so.
    by_name = said["via the fence's proxy, by name"]
    assert by_name.startswith(f"refused: 502 cannot resolve {b_node.dns_name}"), by_name
    assert b_access_lines(real) == before  # nothing of the agent's reached B
    # Sent from boxa by anything outside the fence, the same chain is refused by B.
    response = send_chain(a_node, real.b, forged.split(","))
    assert response.status_code == 403, response.text
    assert refusal(response.json())[1] == real.refused(port)
    assert real_pins(real) == {}


def a_agent_does(real: RealBoxes, plan: dict[str, list[str]]) -> dict[str, str]:
    """What A's agent reports of `plan` (tests/attacks.py), asked by A's owner on A's own
    loopback (A's card names its tailnet URL, which this machine cannot resolve)."""
    headers = {"Authorization": f"Bearer {real.a.server.token}", "A2A-Version": "1.0"}
    with httpx.Client(headers=headers, timeout=120) as http:
        answer = http.post(real.a.server.url + "/", json=send_message(json.dumps(plan))).json()
    task = answer["result"]["task"]
    said = "".join(p.get("text", "") for a in task.get("artifacts", []) for p in a["parts"])
    found: dict[str, str] = json.loads(said[said.index("{") :])
    return found


def b_access_lines(real: RealBoxes) -> list[str]:
    return [line for line in real.b.server.log().splitlines() if "tailagent.access:" in line]
