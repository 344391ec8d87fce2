"""The keys a box checks other nodes' actor-chain hops with (delegation/node_keys.py),
against a real server's card and JWKS: pinned per node on first use, reused, a rotation
followed, a replaced key, a key URL on another node or port and an unreachable node
refused."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tailagent.card.keys import KEYS_FILE, KeyStore
from tailagent.card.peers import checked_card
from tailagent.card.verify import fetch_card
from tailagent.delegation.chain import ChainRefused, extend, verify_chain
from tailagent.delegation.node_keys import KNOWN_NODES_FILE, CardPins, KnownNodes, NodeKeys
from tailagent.store.database import open_database
from tailagent.store.hop_nonces import HopNonces
from tests.conftest import RunningServer, start_server

NODE = "127.0.0.1"  # the node the server's card and JWKS are on
JWKS = "/.well-known/jwks.json"


@pytest.fixture
def box(tmp_path: Path) -> Iterator[RunningServer]:
    """A node whose keys this test changes, or that it stops: a server of its own."""
    running = start_server(tmp_path / "node")
    yield running
    running.stop()


def rotate(server: RunningServer) -> None:
    """What `tailagent keys rotate` does to the node's state dir, done in-process: these
    tests are about the checker following the node's keys, not about the CLI (which
    test_signing runs), and a CLI run costs half a second of CPU."""
    KeyStore(server.state_dir).rotate()


def served_keys(server: RunningServer) -> list[dict[str, str]]:
    keys: list[dict[str, str]] = httpx.get(server.url + JWKS).json()["keys"]
    return keys


def served_kids(server: RunningServer) -> list[str]:
    return [k["kid"] for k in served_keys(server)]


def node_keys(state: Path, server: RunningServer) -> NodeKeys:
    """Box B's look-up, finding tailagents on the port `server` listens on."""
    return NodeKeys.of_state_dir(state, scheme="http", port=int(server.url.rsplit(":", 1)[1]))


def pinned(state: Path) -> dict[str, str]:
    """Node -> the kid pinned for it, as the file on disk says."""
    known = json.loads((state / KNOWN_NODES_FILE).read_text())
    return {origin: entry["jwk"]["kid"] for origin, entry in known.items()}


async def test_first_use_pins_and_later_hops_need_no_fetch(
    box: RunningServer, tmp_path: Path
) -> None:
    state = tmp_path / "checker"
    keys = node_keys(state, box)
    (kid,) = served_kids(box)
    jku = box.url + JWKS
    jwk = await keys(NODE, jku, kid)
    assert jwk["kid"] == kid
    assert pinned(state) == {NODE: kid}
    box.stop()
    # The node is gone: the pinned key still checks its hops, and nothing else does.
    assert (await keys(NODE, jku, kid)) == jwk
    with pytest.raises(ChainRefused, match=f"cannot fetch {box.url}/.well-known/agent-card"):
        await keys(NODE, jku, "another-kid")


async def test_a_rotation_is_followed_while_the_node_still_lists_the_pinned_key(
    box: RunningServer, tmp_path: Path
) -> None:
    state = tmp_path / "checker"
    keys = node_keys(state, box)
    jku = box.url + JWKS
    (old,) = served_kids(box)
    await keys(NODE, jku, old)
    rotate(box)
    new, still = served_kids(box)
    assert still == old
    assert (await keys(NODE, jku, new))["kid"] == new
    assert pinned(state) == {NODE: new}
    # A hop signed just before the rotation still checks; the pin does not move back.
    assert (await keys(NODE, jku, old))["kid"] == old
    assert pinned(state) == {NODE: new}


async def test_a_replaced_key_is_refused_saying_what_to_do(
    box: RunningServer, tmp_path: Path
) -> None:
    state = tmp_path / "checker"
    keys = node_keys(state, box)
    jku = box.url + JWKS
    (old,) = served_kids(box)
    await keys(NODE, jku, old)
    # The box was set up anew: a key of its own, and the pinned one gone from its JWKS.
    (box.state_dir / KEYS_FILE).unlink()
    KeyStore(box.state_dir).init()  # what `tailagent keys init` does
    (replaced,) = served_kids(box)
    with pytest.raises(ChainRefused) as refused:
        await keys(NODE, jku, replaced)
    message = str(refused.value)
    assert f"not the key pinned for {NODE} ({old})" in message
    assert str(state / KNOWN_NODES_FILE) in message and "to trust it anew" in message
    assert pinned(state) == {NODE: old}


async def test_a_key_url_on_another_node_or_an_unknown_kid_is_refused(
    server: RunningServer, tmp_path: Path
) -> None:
    """On the session's shared server: nothing here changes its keys."""
    keys = node_keys(tmp_path / "checker", server)
    (kid,) = served_kids(server)
    with pytest.raises(ChainRefused, match="is not the key set of devbox-1's tailagent"):
        await keys("devbox-1", server.url + JWKS, kid)
    with pytest.raises(ChainRefused, match=f"no key nope in {server.url}{JWKS}"):
        await keys(NODE, server.url + JWKS, "nope")
    assert not (tmp_path / "checker" / KNOWN_NODES_FILE).exists()


async def test_hops_signed_by_the_node_verify_and_a_forged_one_does_not(
    box: RunningServer, tmp_path: Path
) -> None:
    """The whole check, as box B runs it on a hop the node signed with its card key."""
    keys = node_keys(tmp_path / "checker", box)
    jku = box.url + JWKS
    hop = {
        "person": "alice@example.com", "device": "laptop", "node": NODE,
        "audience": "devbox-2", "task_id": "t1", "context_id": "c1",
    }  # fmt: skip

    database = open_database(f"sqlite+aiosqlite:///{tmp_path / 'store.db'}")
    nonces = HopNonces(database, 60)

    async def check(chain: list[str]) -> str:
        verified = await verify_chain(
            chain, caller_node=NODE, this_node="devbox-2", keys=keys, nonces=nonces
        )
        return verified.person

    assert await check(extend([], KeyStore(box.state_dir).current(), jku, **hop)) == (
        "alice@example.com"
    )
    rotate(box)
    assert await check(extend([], KeyStore(box.state_dir).current(), jku, **hop)) == (
        "alice@example.com"
    )
    # A key of someone else's, claiming the node's kid, does not sign for the node.
    foreign = KeyStore(tmp_path / "mallory").ensure()
    claimed = type(foreign)(KeyStore(box.state_dir).current().kid, foreign.alg, foreign.key)
    with pytest.raises(ChainRefused, match=f"hop 1 \\({NODE}\\): bad signature"):
        await check(extend([], claimed, jku, **hop))
    await database.aclose()


async def test_pins_of_the_format_before_issue_55_are_dropped_when_the_server_starts(
    server: RunningServer, tmp_path: Path
) -> None:
    """A box upgraded from the format that pinned per origin: every such pin is dropped
    at start, saying so in one line, even the one under the card's own origin (here
    holding a stranger's key under the node's kid); the node is pinned again from its
    card. A pin per node name is kept as it was. The node is the session's shared server:
    nothing here changes its keys."""
    (real,) = served_keys(server)
    stranger = KeyStore(tmp_path / "stranger").init().jwk
    trusted = "2026-01-01T00:00:00+00:00"
    forger = "http://127.0.0.1:8932"  # what a forger's port pinned before the fix looks like
    kept = {"devbox-3.tail.test": {"jwk": stranger, "card": "http://devbox-3.tail.test",
                                   "trusted": trusted}}  # fmt: skip
    old = {server.url: {"jwk": {**stranger, "kid": real["kid"]}, "trusted": trusted},
           forger: {"jwk": stranger, "trusted": trusted}}  # fmt: skip
    state = tmp_path / "b-state"
    state.mkdir(mode=0o700)
    (state / KNOWN_NODES_FILE).write_text(json.dumps({**old, **kept}))
    upgraded = start_server(tmp_path / "b", state_dir=state)
    upgraded.stop()
    said = [line for line in upgraded.log().splitlines() if "node key pin" in line]
    assert len(said) == 1 and said[0].endswith(
        f"WARNING tailagent.delegation.node_keys: {state / KNOWN_NODES_FILE}: dropped 2 node "
        f"key pin(s) of the format before issue 55, per origin ({server.url}, {forger}): each "
        "node's key is pinned again from its card, at its tailagent's own URL, the next time "
        "it hands work here"
    ), said
    assert json.loads((state / KNOWN_NODES_FILE).read_text()) == kept
    # The node's next hop: its key read from its card, not the one the old pin held.
    assert await node_keys(state, server)(NODE, server.url + JWKS, real["kid"]) == real
    assert pinned(state) == {NODE: real["kid"], "devbox-3.tail.test": stranger["kid"]}


async def card_verdict(pins: CardPins, url: str) -> str:
    """What handing work out makes of the node's card (card/peers.py's `discover`)."""
    async with httpx.AsyncClient() as http:
        return (await checked_card(await fetch_card(url, http), url, http, pins)).status


async def test_the_first_card_read_to_hand_work_out_pins_the_node_as_its_first_hop_would(
    box: RunningServer, tmp_path: Path
) -> None:
    state = tmp_path / "checker"
    pins = CardPins(KnownNodes(state / KNOWN_NODES_FILE))
    assert await card_verdict(pins, box.url) == "valid (key from jku, not pinned)"
    (kid,) = served_kids(box)
    assert pinned(state) == {NODE: kid}
    assert await card_verdict(pins, box.url) == "valid (pinned)"
    # The node's hops are checked against that pin: no fetch needed once it is gone.
    box.stop()
    assert (await node_keys(state, box)(NODE, box.url + JWKS, kid))["kid"] == kid


async def test_handing_work_out_checks_the_card_against_the_key_the_node_s_hops_pinned(
    box: RunningServer, tmp_path: Path
) -> None:
    state = tmp_path / "checker"
    pins = CardPins(KnownNodes(state / KNOWN_NODES_FILE))
    (kid,) = served_kids(box)
    await node_keys(state, box)(NODE, box.url + JWKS, kid)  # a hop of the node pins it
    assert await card_verdict(pins, box.url) == "valid (pinned)"
    # A rotation the node's own key set vouches for is followed, as for its hops.
    rotate(box)
    assert len(served_kids(box)) == 2
    assert await card_verdict(pins, box.url) == "valid (pinned)"
    # A pin the card's key set does not list (the key replaced outright): refused.
    known = json.loads((state / KNOWN_NODES_FILE).read_text())
    known[NODE]["jwk"] = KeyStore(tmp_path / "stranger").ensure().jwk
    (state / KNOWN_NODES_FILE).write_text(json.dumps(known))
    verdict = await card_verdict(pins, box.url)
    assert verdict.startswith("INVALID: the card is not signed by the key pinned"), verdict
    # Pinned for another card URL of the node (another port): not this card's pin.
    assert pins.get(box.url.rsplit(":", 1)[0] + ":1") is None
