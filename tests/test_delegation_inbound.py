"""Box B, handed work by box A for a person: who the request is, and every refusal.

A real server whose tailscaled is tests/fake_tailscaled.py: whois names the calling
box, devbox-1, owned by a login this server does not let in; the person rides in the
`A2A-Actor-Chain` header, signed here with devbox-1's own card key (card/keys.py,
delegation/chain.extend), which the server has pinned in its known_nodes.json (as a
first `tailagent peers` would have), so no key is fetched.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tailagent.card.keys import KeyStore, SigningKey
from tailagent.delegation.chain import extend
from tests.conftest import RunningServer, start_server
from tests.tailnet import NODE_DNS, FakeTailscaled, request, send_message, whois
from tests.test_isolation import git, make_project, worktree_path
from tests.warm_start import cli_run

ALICE, MALLORY = "alice@example.com", "mallory@example.com"
BOX_A = "devbox-1.tail1234.ts.net"  # as whois names the calling box (tests/tailnet.py)
JKU = f"https://{BOX_A}/.well-known/jwks.json"
CAPABILITY = "example.com/cap/tailagent"
ADDRESSES = {"devbox-1": "100.64.0.5", "devbox-3": "100.64.0.6", "devbox-4": "100.64.0.7",
             "laptop": "100.64.0.9"}  # fmt: skip


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeTailscaled]:
    tailscaled = FakeTailscaled(tmp_path_factory.mktemp("tailscaled"))
    # The boxes belong to a login B does not let in: only the chain can name a person.
    for name in ("devbox-1", "devbox-3"):
        tailscaled.peers[ADDRESSES[name]] = whois(
            "builder@example.com", name=name, ip=ADDRESSES[name]
        )
    # devbox-4 is let hand work here by a grant, not by name.
    tailscaled.peers[ADDRESSES["devbox-4"]] = whois(
        "builder@example.com", name="devbox-4", ip=ADDRESSES["devbox-4"],
        caps={CAPABILITY: [{"delegate": True}]},
    )  # fmt: skip
    tailscaled.peers[ADDRESSES["laptop"]] = whois(ALICE, ip=ADDRESSES["laptop"])
    yield tailscaled.start()
    tailscaled.stop()


@pytest.fixture(scope="module")
def box_a(tmp_path_factory: pytest.TempPathFactory) -> SigningKey:
    return KeyStore(tmp_path_factory.mktemp("devbox-1")).init()


def pin(state: Path, key: SigningKey) -> None:
    """devbox-1's key pinned in `state`, as a first `tailagent peers` would have."""
    state.mkdir(parents=True, exist_ok=True)
    card = f"https://{BOX_A}"
    pinned = {BOX_A: {"jwk": key.jwk, "card": card, "trusted": "2025-01-01T00:00:00+00:00"}}
    (state / "known_nodes.json").write_text(json.dumps(pinned))


def serve_b(
    tmp: Path, fake: FakeTailscaled, key: SigningKey, roles: str, delegation: str = ""
) -> RunningServer:
    """Box B, letting alice in directly and devbox-1 hand work in, with devbox-1's key
    pinned, its workspace a git repository (so a turn ends in a commit); `delegation`
    adds lines to its [delegation] table."""
    make_project(tmp / "workspace", {"calc.py": "def add(a, b):\n    return a - b\n"})
    config = tmp / "tailagent.toml"
    config.write_text(
        f'[access]\nallowed_logins = ["{ALICE}"]\ncapability = "{CAPABILITY}"\n'
        f'[delegation]\nallowed_nodes = ["devbox-1"]\nroles = {roles}\n{delegation}'
    )
    pin(tmp / "state", key)
    return start_server(
        tmp, "--config", str(config), "--tailscale-socket", str(fake.socket),
        "--isolation", "worktree",
    )  # fmt: skip


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeTailscaled, box_a: SigningKey
) -> Iterator[RunningServer]:
    running = serve_b(tmp_path_factory.mktemp("box-b"), fake, box_a, '["caller", "approver"]')
    yield running
    running.stop()


def chain(
    key: SigningKey, person: str = ALICE, *, before: list[str] | None = None, **hop: Any
) -> list[str]:
    """devbox-1's hop for `person` on their laptop, addressed to box B."""
    fields: dict[str, Any] = {"device": "laptop", "node": BOX_A, "audience": NODE_DNS,
                              "task_id": "task-on-a", "context_id": "ctx-on-a", **hop}  # fmt: skip
    return extend(before or [], key, hop.pop("jku", JKU), person=person, **fields)


def send(
    server: RunningServer, tokens: list[str] | None, body: dict[str, Any], source: str = "devbox-1"
) -> tuple[int, dict[str, Any]]:
    headers = {"X-Forwarded-For": ADDRESSES[source], "Host": NODE_DNS}
    if tokens is not None:
        headers["A2A-Actor-Chain"] = ",".join(tokens)
    port = int(urlsplit(server.url).port or 0)
    return request("127.0.0.1", port, body=body, headers=headers)


def reason(body: dict[str, Any]) -> str:
    return str(body["error"]["message"])


def answer(task: dict[str, Any], request_id: str) -> dict[str, Any]:
    data = {"kind": "permission_response", "decision": "allow", "requestId": request_id}
    message = {
        "messageId": f"m-{time.monotonic_ns()}",
        "role": "ROLE_USER",
        "taskId": task["id"],
        "contextId": task["contextId"],
        "parts": [{"data": data}],
    }
    return {"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": message}}


def pending_id(task: dict[str, Any]) -> str:
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", task["status"]
    return next(p["data"]["requestId"] for p in task["status"]["message"]["parts"] if "data" in p)


def test_a_delegated_task_is_the_persons_and_names_the_box_too(
    server: RunningServer, box_a: SigningKey
) -> None:
    tokens = chain(box_a)
    status, body = send(server, tokens, send_message("edit ask"))
    assert status == 200, body
    task = body["result"]["task"]
    line = server.last_access_line()
    assert f"user:{ALICE} (actor chain from devbox-1, " in line and ") via devbox-1" in line
    assert task["metadata"]["actorChain"] == tokens  # echoed, as A2A #2028 places it
    assert task["metadata"]["requestedBy"] == {"who": ALICE, "device": "laptop", "via": "devbox-1"}

    # Alice, from her laptop directly, sees it among her own tasks.
    listing = {"jsonrpc": "2.0", "id": 3, "method": "ListTasks", "params": {}}
    status, listed = send(server, None, listing, source="laptop")
    assert status == 200 and task["id"] in [t["id"] for t in listed["result"]["tasks"]], listed

    status, done = send(server, chain(box_a), answer(task, pending_id(task)))
    assert status == 200 and done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    branch = "tailagent/" + task["contextId"][:8]
    trailers = git(worktree_path(server.state_dir, branch), "log", "-1", "--format=%(trailers)")
    assert f"Requested-by: {ALICE} (laptop) via devbox-1" in trailers, trailers
    audit = cli_run(
        [sys.executable, "-m", "tailagent", "audit", "--state-dir", str(server.state_dir)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert f"user:{ALICE} (actor chain from devbox-1, " in audit.stdout, audit.stdout
    assert "via devbox-1 on laptop" in audit.stdout, audit.stdout


def refused(server: RunningServer, tokens: list[str], source: str = "devbox-1", **kw: Any) -> str:
    status, body = send(server, tokens, kw.get("body") or send_message("refused"), source)
    assert status == 403, body
    return reason(body)


def test_a_box_not_in_allowed_nodes_may_not_hand_work(
    server: RunningServer, box_a: SigningKey
) -> None:
    said = refused(server, chain(box_a, node="devbox-3.tail1234.ts.net"), source="devbox-3")
    assert said == "node devbox-3 may not hand work here: add it to delegation.allowed_nodes"
    assert "refused: node devbox-3 may not hand work here" in server.last_access_line()


def test_a_person_this_box_would_not_let_in_is_refused(
    server: RunningServer, box_a: SigningKey
) -> None:
    said = refused(server, chain(box_a, MALLORY))
    assert said.startswith(f"login {MALLORY} is not let in here directly"), said


def test_forged_and_edited_chains_are_refused(
    server: RunningServer, box_a: SigningKey, tmp_path: Path
) -> None:
    stranger = KeyStore(tmp_path).init()
    # Signed with another key, under the kid devbox-1's pinned key has.
    forged = refused(server, chain(SigningKey(box_a.kid, stranger.alg, stranger.key)))
    assert forged.startswith("actor chain refused: hop 1 (") and "bad signature" in forged, forged
    # A key of its own that devbox-1 does not publish: fetched, and not found (fails closed).
    assert refused(server, chain(stranger)).startswith("actor chain refused: hop 1 (")
    # devbox-1's real hop, its person edited to another.
    head, payload, signature = chain(box_a)[0].split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    edited = base64.urlsafe_b64encode(json.dumps({**claims, "sub": MALLORY}).encode())
    said = refused(server, [f"{head}.{edited.decode().rstrip('=')}.{signature}"])
    assert "bad signature" in said, said


def test_replayed_looped_too_deep_and_stale_chains_are_refused(
    server: RunningServer, box_a: SigningKey
) -> None:
    tokens = chain(box_a)
    assert send(server, tokens, send_message("once"))[0] == 200
    assert "already used (a replay)" in refused(server, tokens)
    # devbox-1 handing work to itself, then here: a loop.
    looped = refused(server, chain(box_a, before=chain(box_a, audience=BOX_A)))
    assert f"a loop: {BOX_A} is in the chain twice" in looped, looped
    # Four hops where delegation.max_depth is 3.
    deep: list[str] = []
    for _ in range(3):
        deep = chain(box_a, before=deep, audience=BOX_A)
    assert "deeper than delegation.max_depth (3)" in refused(server, chain(box_a, before=deep))
    stale = refused(server, chain(box_a, now=time.time() - 600))
    assert "outside the 60 s window" in stale, stale


def test_the_last_hop_must_be_the_box_that_calls(server: RunningServer, box_a: SigningKey) -> None:
    """devbox-4 may hand work here (its grant lets it: its chain is judged), but not
    with devbox-1's hop as its own."""
    said = refused(server, chain(box_a), source="devbox-4")
    assert said == (f"actor chain refused: the hop that calls is {BOX_A}, but the caller "
                    "is devbox-4.tail1234.ts.net"), said  # fmt: skip


def test_a_message_naming_another_chain_than_its_header_is_refused(
    server: RunningServer, box_a: SigningKey
) -> None:
    body = send_message("mismatch")
    body["params"]["message"]["metadata"] = {"actorChain": chain(box_a, MALLORY)}
    said = refused(server, chain(box_a), body=body)
    assert said == "the message's actorChain is not the request's"


def test_without_a_chain_the_box_is_judged_as_itself(server: RunningServer) -> None:
    status, body = send(server, None, send_message("as myself"))
    assert status == 403 and "login builder@example.com is not in access.allowed_logins" in reason(
        body
    )


def test_a_delegated_request_gets_only_the_roles_both_allow(
    tmp_path: Path, fake: FakeTailscaled, box_a: SigningKey
) -> None:
    """Alice approves here directly; handed in where delegation.roles is only
    `caller`, she may ask but not answer."""
    box = serve_b(tmp_path, fake, box_a, '["caller"]')
    try:
        status, body = send(box, chain(box_a), send_message("ask"))
        assert status == 200, body
        task = body["result"]["task"]
        status, answered = send(box, chain(box_a), answer(task, pending_id(task)))
        said = json.dumps(answered)
        assert "approver" in said and "TASK_STATE_COMPLETED" not in said, said
    finally:
        box.stop()


def test_a_sibling_s_one_hop_is_the_person_as_if_they_called_here(
    tmp_path: Path, fake: FakeTailscaled, box_a: SigningKey
) -> None:
    """devbox-1 named a sibling (a box of the same store, cluster/carry.py): its one hop
    makes the request alice's with the roles she has here directly, though
    delegation.roles is only `caller`, so she answers; the access line says who
    carried it, and no "via"."""
    box = serve_b(tmp_path, fake, box_a, '["caller"]', 'siblings = ["devbox-1"]\n')
    try:
        status, body = send(box, chain(box_a), send_message("ask"))
        assert status == 200, body
        task = body["result"]["task"]
        status, answered = send(box, chain(box_a), answer(task, pending_id(task)))
        assert status == 200 and "TASK_STATE_COMPLETED" in json.dumps(answered), answered
        line = box.last_access_line()
        assert f"user:{ALICE} (carried by devbox-1," in line and " via " not in line, line
    finally:
        box.stop()
