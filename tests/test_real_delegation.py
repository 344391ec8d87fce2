"""Delegation across a real tailnet: a person's task on box A hands a sub-task to box B.

Five tailscaled nodes on one control server (tests/real_tailnet.py): the person's
"laptop", "boxa" and "boxb" running tailagent behind `tailscale serve --http=80`, a
"guest" whom A lets in and B does not, and "boxc", a node B lets delegate that runs no
tailagent (to send a chain it did not sign). testcontrol makes every node its own user,
user-N in join order. The person talks to A from the laptop through its tailscaled, with
the a2a-sdk client; A reaches B through boxa's tailscaled (`[delegation] proxy`), and B
fetches A's keys the same way through boxb's. Forged chains are made with
tailagent.delegation.chain and A's own card key, and sent from boxa's node (or boxc's).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import Client, ClientConfig, create_client
from a2a.types.a2a_pb2 import CancelTaskRequest, ListTasksRequest, Message, SendMessageRequest, Task
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf.json_format import MessageToDict

from tailagent.card.keys import KeyStore, SigningKey
from tailagent.delegation.chain import CHAIN_HEADER, CHAIN_KEY, extend
from tests.a2a_helpers import Turn, state_name, texts, user_message
from tests.conftest import RunningServer, start_server
from tests.real_tailnet import DOMAIN, Node, Tailnet, module_tailnet
from tests.tailnet import free_port, refusal
from tests.test_isolation import git, make_project, worktree_path
from tests.test_real_tailnet import audit_rows, peers_seen_from

USERS = "fake-control.example.net"
PERSON = f"user-1@{USERS}"  # the laptop joins first
GUEST = f"user-4@{USERS}"
JWKS = "/.well-known/jwks.json"
CATALOG = "/.well-known/ai-catalog.json"
WAIT = 30.0  # seconds a task on B is waited for, to appear or to reach a state


@dataclass
class Box:
    """tailagent on a node, on a fixed loopback port behind `tailscale serve --http=80`,
    so a restart on the same state dir is reached again at the same address."""

    node: Node
    tmp: Path
    config: Path
    listen: str
    server: RunningServer
    isolation: str

    @property
    def url(self) -> str:
        return f"http://{self.node.dns_name}"

    @property
    def jku(self) -> str:
        return self.url + JWKS

    def restart(self) -> None:
        self.server.stop()
        self.server = start_server(self.tmp, *serve_args(self.node, self.config, self.isolation),
                                   state_dir=self.server.state_dir, listen=self.listen)  # fmt: skip


def serve_args(node: Node, config: Path, isolation: str) -> tuple[str, ...]:
    return ("--config", str(config), "--tailscale-socket", str(node.socket),
            "--public-url", f"http://{node.dns_name}", "--isolation", isolation)  # fmt: skip


# A's own rule allows `rm` for its own agent; a question B's agent asks is still the
# person's to answer (A's rules never decide a relayed prompt).
ALLOW_RM_HERE = '[[rules]]\ntool = "Bash"\ncommand = "rm*"\ndecision = "allow"\n'


def box_config(node: Node, logins: list[str], delegation: dict[str, Any], extra: str = "") -> str:
    """A box's tailagent.toml: who it lets in, and how it delegates (reaching peers by
    MagicDNS name on port 80 through its own tailscaled's proxy)."""
    settings = {"proxy": node.proxy, "scheme": "http", "port": 80, **delegation}
    lines = ["[access]", f"allowed_logins = {json.dumps(logins)}", "[delegation]"]
    lines += [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
    return "\n".join(lines) + "\n" + extra


def start_box(
    node: Node,
    tmp: Path,
    logins: list[str],
    delegation: dict[str, Any] | None = None,
    isolation: str = "worktree",
    extra: str = "",
) -> Box:
    """tailagent with the echo agent on `node`, by default each conversation in a
    repository of its own (B's commit trailers are checked), served on the tailnet at
    port 80."""
    make_project(tmp / "workspace")
    config = tmp / "tailagent.toml"
    config.write_text(box_config(node, logins, delegation or {}, extra))
    listen = f"127.0.0.1:{free_port()}"
    server = start_server(tmp, *serve_args(node, config, isolation), listen=listen)
    node.tailscale("serve", "--bg", "--http=80", server.url)
    return Box(node, tmp, config, listen, server, isolation)


def stop_box(box: Box) -> None:
    box.node.tailscale("serve", "--http=80", "off", check=False)
    box.server.stop()


@pytest.fixture(scope="module")
def tailnet() -> Iterator[Tailnet]:
    nodes = {name: {"proxy": True} for name in ("laptop", "boxa", "boxb", "guest", "boxc")}
    yield from module_tailnet(nodes)


@pytest.fixture(scope="module")
def boxb(tailnet: Tailnet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    """B lets the person in, and lets boxa (and boxc) hand it work."""
    box = start_box(tailnet.nodes["boxb"], tmp_path_factory.mktemp("boxb"), [PERSON],
                    {"allowed_nodes": ["boxa", "boxc"]})  # fmt: skip
    yield box
    stop_box(box)


@pytest.fixture(scope="module")
def boxa(tailnet: Tailnet, boxb: Box, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    """A lets the person and the guest in; it asks before every hand-off, and allows
    `rm` to its own agent by a rule."""
    box = start_box(tailnet.nodes["boxa"], tmp_path_factory.mktemp("boxa"), [PERSON, GUEST],
                    extra=ALLOW_RM_HERE)  # fmt: skip
    yield box
    stop_box(box)


@asynccontextmanager
async def client_of(node: Node, box: Box) -> AsyncIterator[Client]:
    """The a2a-sdk client of whoever uses `node`, talking to `box` across the tailnet."""
    async with httpx.AsyncClient(proxy=node.proxy, headers={"A2A-Version": "1.0"},
                                 timeout=120) as http:  # fmt: skip
        client = await create_client(box.url, ClientConfig(httpx_client=http))
        try:
            yield client
        finally:
            await client.close()


async def turn(client: Client, message: Message | str) -> Turn:
    if isinstance(message, str):
        message = user_message(message)
    done = Turn()
    async for event in client.send_message(SendMessageRequest(message=message)):
        done.events.append(event)
    return done


def allow(asked: Turn) -> Message:
    return user_message(task_id=asked.task_id, context_id=asked.context_id, data={
        "kind": "permission_response", "decision": "allow",
        "requestId": asked.pending["requestId"]})  # fmt: skip


def everything_said(done: Turn) -> str:
    """Every status line and artifact text of a turn, as a person reading it sees them."""
    lines = [texts(s.status.message) for s in done.statuses]
    lines += [texts(e.artifact_update.artifact) for e in done.events
              if e.HasField("artifact_update")]  # fmt: skip
    return "\n".join(lines)


async def tasks_on(box: Box, node: Node) -> list[Task]:
    """Tasks on `box` as the user of `node` sees them (ListTasks across the tailnet)."""
    async with client_of(node, box) as client:
        return list((await client.list_tasks(ListTasksRequest())).tasks)


async def new_task_on(box: Box, node: Node, before: set[str]) -> Task:
    """The one task on `box` that `node`'s user sees now and did not before."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        fresh = [t for t in await tasks_on(box, node) if t.id not in before]
        if fresh:
            assert len(fresh) == 1, [t.id for t in fresh]
            return fresh[0]
        await asyncio.sleep(0.2)
    raise AssertionError(f"no new task on {box.node.name} in {WAIT} s")


async def state_becomes(box: Box, node: Node, task_id: str, want: str) -> str:
    """The task's state once it is `want`, or as it is after WAIT seconds."""
    deadline = time.monotonic() + WAIT
    state = ""
    while time.monotonic() < deadline:
        state = next(state_name(t.status.state) for t in await tasks_on(box, node)
                     if t.id == task_id)  # fmt: skip
        if state == want:
            break
        await asyncio.sleep(0.2)
    return state


async def test_the_person_hands_work_to_b_and_answers_b_s_question_on_a(
    tailnet: Tailnet, boxa: Box, boxb: Box
) -> None:
    laptop = tailnet.nodes["laptop"]
    before = {t.id for t in await tasks_on(boxb, laptop)}
    async with client_of(laptop, boxa) as a:
        asked = await turn(a, "delegate:boxb ask:cleanup edit:notes.txt")
        assert asked.final_state == "input_required", everything_said(asked)
        assert texts(asked.last_message) == (
            "Permission requested: Hand to boxb: ask:cleanup edit:notes.txt"
        )
        relayed = await turn(a, allow(asked))
        assert relayed.final_state == "input_required", everything_said(relayed)
        assert texts(relayed.last_message) == (
            "Permission requested: boxb's agent asks to run `rm -rf cleanup`"
        )
        assert [o["name"] for o in relayed.pending["options"]] == ["Allow", "Deny"]  # B's own
        done = await turn(a, allow(relayed))
        assert done.final_state == "completed", everything_said(done)
        assert "echo: ask:cleanup edit:notes.txt" in everything_said(done)

    # On B the task is the person's own: listed to her, from her laptop, straight to B.
    on_b = await new_task_on(boxb, laptop, before)
    assert state_name(on_b.status.state) == "completed"
    metadata = MessageToDict(on_b.metadata)
    assert len(metadata[CHAIN_KEY]) == 1  # the chain it came with, one hop: boxa's
    mine = [r for r in audit_rows(boxb.server) if r["task_id"] == on_b.id]
    assert [r["decision"] for r in mine] == ["allow"], mine
    assert mine[0]["answered_by"].startswith(f"user:{PERSON}"), mine
    assert "via boxa" in mine[0]["answered_by"], mine
    branch = metadata["worktree"]["branch"]
    trailers = git(worktree_path(boxb.server.state_dir, branch), "log", "-1",
                   "--format=%(trailers)", branch)  # fmt: skip
    assert f"Requested-by: {PERSON} (laptop) via boxa" in trailers
    assert f"{PERSON} (actor chain from boxa" in boxb.server.log()


def a_key(state_dir: Path) -> SigningKey:
    return KeyStore(state_dir).current()


def hop(boxa: Box, chain: list[str], audience: str, key: SigningKey | None = None,
        now: float | None = None) -> list[str]:  # fmt: skip
    """`chain` and one more hop signed as boxa (with its own card key unless `key`)."""
    return extend(chain, key or a_key(boxa.server.state_dir), boxa.jku, person=PERSON,
                  device="laptop", node=f"boxa.{DOMAIN}", audience=f"{audience}.{DOMAIN}",
                  task_id="task-on-a", context_id="context-on-a", now=now)  # fmt: skip


def send_chain(node: Node, box: Box, tokens: list[str], text: str = "hello") -> httpx.Response:
    """A SendMessage from `node` to `box`, carrying `tokens` as the actor chain in the
    header and in the message's metadata."""
    message = {"messageId": f"m-{time.monotonic_ns()}", "role": "ROLE_USER",
               "parts": [{"text": text}], "metadata": {CHAIN_KEY: tokens}}  # fmt: skip
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    headers = {"A2A-Version": "1.0", CHAIN_HEADER: ",".join(tokens)}
    with httpx.Client(proxy=node.proxy, timeout=60) as http:
        return http.post(box.url + "/", json=body, headers=headers)


def with_payload(token: str, **changes: Any) -> str:
    """The token with its payload edited and its signature kept."""
    header, payload, signature = token.split(".")
    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    edited = base64.urlsafe_b64encode(json.dumps({**data, **changes}).encode()).rstrip(b"=")
    return f"{header}.{edited.decode()}.{signature}"


def stranger_key(boxa: Box) -> SigningKey:
    """A key boxa never published, under boxa's own kid."""
    real = a_key(boxa.server.state_dir)
    return SigningKey(real.kid, "ES256", ec.generate_private_key(ec.SECP256R1()))


def two_hops(boxa: Box) -> list[str]:
    """boxa -> boxa -> boxb: signed right and linked right, but boxa is in it twice."""
    return hop(boxa, hop(boxa, [], "boxa"), "boxb")


def reordered(boxa: Box) -> list[str]:
    """The first hop swapped for another boxa signed: the second's prev no longer fits."""
    chain = two_hops(boxa)
    return [hop(boxa, [], "boxa")[0], chain[1]]


FORGERIES: dict[str, tuple[Callable[[Box], list[str]], str]] = {
    "wrong key": (lambda a: hop(a, [], "boxb", key=stranger_key(a)),
                  "(boxa.tail.test): bad signature"),
    "edited entry": (lambda a: [with_payload(hop(a, [], "boxb")[0], sub=GUEST)],
                     "(boxa.tail.test): bad signature"),
    "reordered": (reordered, "was edited or the chain reordered"),
    "looped": (two_hops, "a loop: boxa.tail.test is in the chain twice"),
    "too deep": (lambda a: hop(a, hop(a, hop(a, hop(a, [], "boxa"), "boxa"), "boxa"), "boxb"),
                 "the chain is 4 hops, deeper than delegation.max_depth (3)"),
    "addressed elsewhere": (lambda a: hop(a, [], "boxc"),
                            "the chain is addressed to boxc.tail.test, not this node"),
    "stale": (lambda a: hop(a, [], "boxb", now=time.time() - 600),
              "outside the 60 s window"),
}  # fmt: skip


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_forged_chain_is_refused_by_b_saying_which_check_failed(
    tailnet: Tailnet, boxa: Box, boxb: Box, forgery: str
) -> None:
    make, reason = FORGERIES[forgery]
    response = send_chain(tailnet.nodes["boxa"], boxb, make(boxa))
    assert response.status_code == 403, response.text
    said = refusal(response.json())[1]
    assert said.startswith("actor chain refused: "), said
    assert reason in said, said


def test_a_chain_sent_again_is_a_replay(tailnet: Tailnet, boxa: Box, boxb: Box) -> None:
    chain = hop(boxa, [], "boxb")
    first = send_chain(tailnet.nodes["boxa"], boxb, chain, "once")
    assert first.status_code == 200, first.text
    assert first.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    again = send_chain(tailnet.nodes["boxa"], boxb, chain, "twice")
    assert again.status_code == 403, again.text
    assert "nonce was already used (a replay)" in refusal(again.json())[1]


def test_a_chain_boxa_signed_sent_by_another_node_is_refused(
    tailnet: Tailnet, boxa: Box, boxb: Box
) -> None:
    response = send_chain(tailnet.nodes["boxc"], boxb, hop(boxa, [], "boxb"))
    assert response.status_code == 403, response.text
    said = refusal(response.json())[1]
    assert "the hop that calls is boxa.tail.test, but the caller is boxc" in said, said


def test_a_node_b_does_not_allow_to_delegate_is_refused(
    tailnet: Tailnet, boxa: Box, boxb: Box
) -> None:
    response = send_chain(tailnet.nodes["guest"], boxb, hop(boxa, [], "boxb"))
    assert response.status_code == 403, response.text
    said = refusal(response.json())[1]
    assert "node guest may not hand work here: add it to delegation.allowed_nodes" in said


async def test_a_person_a_lets_in_and_b_does_not_is_refused_by_b_and_told_on_a(
    tailnet: Tailnet, boxa: Box, boxb: Box
) -> None:
    async with client_of(tailnet.nodes["guest"], boxa) as a:
        asked = await turn(a, "delegate:boxb hello from the guest")
        assert asked.final_state == "input_required", everything_said(asked)
        done = await turn(a, allow(asked))
    said = everything_said(done)
    assert GUEST in said and "boxb" in said, said  # B's refusal, naming her, reached A
    assert "echo: hello from the guest" not in said
    let_in = [line for line in boxb.server.log().splitlines()
              if "tailagent.access:" in line and GUEST in line and "-> 200" in line]  # fmt: skip
    assert let_in == []


async def test_cancel_on_a_cancels_b_s_task(tailnet: Tailnet, boxa: Box, boxb: Box) -> None:
    laptop = tailnet.nodes["laptop"]
    before = {t.id for t in await tasks_on(boxb, laptop)}
    async with client_of(laptop, boxa) as a:
        asked = await turn(a, "delegate:boxb slow 60")
        assert asked.final_state == "input_required", everything_said(asked)
        running = asyncio.create_task(turn(a, allow(asked)))
        on_b = await new_task_on(boxb, laptop, before)
        assert await state_becomes(boxb, laptop, on_b.id, "working") == "working"
        async with client_of(laptop, boxa) as other:
            cancelled = await other.cancel_task(CancelTaskRequest(id=asked.task_id))
        assert state_name(cancelled.status.state) == "canceled"
        ended = await asyncio.wait_for(running, 30)
    assert ended.final_state == "canceled", everything_said(ended)
    assert await state_becomes(boxb, laptop, on_b.id, "canceled") == "canceled"


async def test_b_restarted_while_the_person_decides_still_takes_the_answer(
    tailnet: Tailnet, boxa: Box, boxb: Box
) -> None:
    laptop = tailnet.nodes["laptop"]
    before = {t.id for t in await tasks_on(boxb, laptop)}
    async with client_of(laptop, boxa) as a:
        asked = await turn(a, "delegate:boxb ask:restart")
        relayed = await turn(a, allow(asked))
        assert relayed.final_state == "input_required", everything_said(relayed)
        assert "boxb's agent asks to run `rm -rf restart`" in texts(relayed.last_message)
        on_b = await new_task_on(boxb, laptop, before)
        await asyncio.to_thread(boxb.restart)
        done = await turn(a, allow(relayed))
    assert done.final_state == "completed", everything_said(done)
    # B's agent was reloaded with the question it had asked, and says what was decided.
    assert "allowed it: do it now" in everything_said(done)
    assert await state_becomes(boxb, laptop, on_b.id, "completed") == "completed"


def test_peers_from_the_laptop_lists_both_boxes(
    tailnet: Tailnet, boxa: Box, boxb: Box, tmp_path: Path
) -> None:
    rows = peers_seen_from(tailnet.nodes["laptop"], tmp_path / "known.json")
    assert sorted(r["peer"] for r in rows) == [boxa.node.dns_name, boxb.node.dns_name]


def catalog_seen_from(node: Node, box: Box) -> list[dict[str, Any]]:
    with httpx.Client(proxy=node.proxy, timeout=30) as http:
        response = http.get(box.url + CATALOG)
    assert response.status_code == 200, response.text
    entries: list[dict[str, Any]] = response.json()["entries"]
    return entries


def test_b_s_ai_catalog_lists_its_agent_to_who_may_use_it_only(
    tailnet: Tailnet, boxa: Box, boxb: Box
) -> None:
    for viewer in ("boxa", "laptop"):  # a node that may delegate; a person let in
        entries = catalog_seen_from(tailnet.nodes[viewer], boxb)
        assert any(boxb.node.dns_name in json.dumps(e) for e in entries), (viewer, entries)
    assert catalog_seen_from(tailnet.nodes["guest"], boxb) == []  # nobody B lets in
