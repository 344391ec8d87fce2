"""A hop's key is trusted only from the tailagent of the node that signed it (issue 55,
section 1): forgers on a node that B trusts, signing for alice or for B's owner with a
key set of their own served on another port of that node, are refused with words that
say so, and their key set is never fetched nor pinned.

Two real servers on loopback (tests/two_boxes.py), A on devbox-1 and B on devbox-2; the
proxy that plays the tailnet tells B every call comes from devbox-1, as any process on
devbox-1 would. The forgers, both on devbox-1: another user's real tailagent, on port
8931, and a bare local process (what a fenced agent could run) serving a JWKS and a
card on port 8932.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailagent.card.keys import KeyStore, SigningKey
from tailagent.delegation.chain import extend
from tailagent.delegation.node_keys import KNOWN_NODES_FILE
from tests.conftest import RunningServer, start_server
from tests.tailnet import OWNER, send_message
from tests.two_boxes import A_NODE, ALICE, B_NODE, Boxes, port_of, start_boxes

JWKS = "/.well-known/jwks.json"
REFUSED = (
    f"a key set served by another process, another port or another user on {A_NODE} "
    "signs for no one"
)


class KeySetServer(ThreadingHTTPServer):
    """A local process on devbox-1 serving a key set and a card of its own, and noting
    every path asked of it."""

    def __init__(self, key: SigningKey, url: str) -> None:
        super().__init__(("127.0.0.1", 0), _KeySetHandler)
        self.asked: list[str] = []
        self.bodies = {
            JWKS: {"keys": [key.jwk]},
            "/.well-known/agent-card.json": {
                "name": "mallory", "supportedInterfaces": [{"url": url}],
            },
        }  # fmt: skip
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _KeySetHandler(BaseHTTPRequestHandler):
    server: KeySetServer

    def do_GET(self) -> None:
        self.server.asked.append(self.path)
        body = json.dumps(self.server.bodies.get(self.path, {})).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


class Forgers:
    """B, A, and the two forgers on devbox-1's other ports."""

    def __init__(self, tmp: Path) -> None:
        self.boxes: Boxes = start_boxes(tmp)
        self.other_user: RunningServer = start_server(
            tmp / "mallory", "--public-url", f"http://{A_NODE}:8931"
        )
        self.boxes.proxy.routes[f"{A_NODE}:8931"] = port_of(self.other_user)
        self.fenced_key = KeyStore(tmp / "fenced").init()
        self.process = KeySetServer(self.fenced_key, f"http://{A_NODE}:8932")
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
