"""The actor chain: chains signed by real card keys (ES256 and EdDSA) verify, each
forgery is refused with the line that says which check failed, and an independent
JOSE implementation reads the tokens as the documented shape."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from joserfc import jwk as jose_jwk
from joserfc import jws as jose_jws
from jwt import api_jws

from tailagent.card.keys import KeyStore, SigningKey
from tailagent.delegation.chain import (
    TOKEN_TYPE,
    ChainRefused,
    Hop,
    Verified,
    extend,
    hops_of,
    parse_header,
    sign_hop,
    verify_chain,
)
from tailagent.store.database import open_database
from tailagent.store.hop_nonces import HopNonces, NoncesFull

DOMAIN = "tail.example.ts.net"
PERSON = "alice@example.com"
NOW = 1_800_000_000.0


def fqdn(short: str) -> str:
    return f"{short}.{DOMAIN}"


def jku(short: str) -> str:
    return f"https://{fqdn(short)}/.well-known/jwks.json"


@dataclass
class Tailnet:
    """Nodes with card keys of their own, as card/keys.py makes them on first start."""

    stores: dict[str, KeyStore]
    # The nonces the node called keeps: in a real SQLite store, as a server keeps them.
    nonces: HopNonces

    def key(self, short: str) -> SigningKey:
        return self.stores[short].current()

    async def keys(self, node: str, url: str, kid: str) -> dict[str, Any]:
        """The KeyLookup a server gives: the key its pinned JWKS names for (node, kid)."""
        short = node.removesuffix(f".{DOMAIN}")
        if short not in self.stores or url != jku(short):
            raise ChainRefused(f"no key pinned for {url}")
        for jwk in self.stores[short].jwks()["keys"]:
            if jwk["kid"] == kid:
                return jwk
        raise ChainRefused(f"no key {kid} in the JWKS pinned for {node}")

    def chain(
        self, path: Sequence[str], *, person: str = PERSON, times: dict[int, float] | None = None
    ) -> list[str]:
        """The chain along `path` (signers, then the node called), each hop signed by its
        node; `times` sets a hop's own signing time ({hop number: time}), else NOW."""
        tokens: list[str] = []
        for number, (node, audience) in enumerate(pairwise(path), 1):
            tokens = extend(
                tokens,
                self.key(node),
                jku(node),
                person=person,
                device="laptop",
                node=fqdn(node),
                audience=fqdn(audience),
                task_id=f"task-on-{node}",
                context_id=f"ctx-on-{node}",
                now=(times or {}).get(number, NOW),
            )
        return tokens

    async def verify(
        self, tokens: Sequence[str], *, caller: str, this: str, **options: Any
    ) -> Verified:
        options = {"nonces": self.nonces, "now": NOW, **options}
        return await verify_chain(
            tokens, caller_node=fqdn(caller), this_node=fqdn(this), keys=self.keys, **options
        )

    async def refused(
        self, tokens: Sequence[str], *, caller: str, this: str, **options: Any
    ) -> str:
        with pytest.raises(ChainRefused) as refusal:
            await self.verify(tokens, caller=caller, this=this, **options)
        reason = str(refusal.value)
        assert "\n" not in reason
        return reason


@pytest.fixture(params=["ES256", "EdDSA"])
async def tailnet(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Tailnet]:
    stores = {}
    for short in ("devbox-1", "devbox-2", "devbox-3", "devbox-4", "target"):
        stores[short] = KeyStore(tmp_path / short)
        stores[short].init(request.param)
    database = open_database(f"sqlite+aiosqlite:///{tmp_path / 'store.db'}")
    yield Tailnet(stores, HopNonces(database, 60))
    await database.aclose()


def payload_of(token: str) -> dict[str, Any]:
    part = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def with_payload(token: str, payload: dict[str, Any]) -> str:
    """`token` with its payload replaced and its signature kept: an edited entry."""
    header, _, signature = token.split(".")
    return f"{header}.{b64(json.dumps(payload).encode())}.{signature}"


@pytest.mark.parametrize(
    "path",
    [
        ["devbox-1", "target"],
        ["devbox-1", "devbox-2", "target"],
        ["devbox-1", "devbox-2", "devbox-3", "target"],
    ],
    ids=["1 hop", "2 hops", "3 hops"],
)
async def test_a_good_chain_verifies(tailnet: Tailnet, path: list[str]) -> None:
    tokens = tailnet.chain(path)
    header = ",".join(tokens)
    verified = await tailnet.verify(parse_header(header), caller=path[-2], this="target")
    assert verified.person == verified.acting == PERSON
    assert verified.device == "laptop"
    assert verified.nodes == tuple(fqdn(node) for node in path[:-1])
    assert verified.caller_node == fqdn(path[-2])
    assert verified.tokens == tuple(tokens)
    assert list(verified.hops) == hops_of(tokens)
    assert [hop.task_id for hop in verified.hops] == [f"task-on-{node}" for node in path[:-1]]


async def test_nodes_with_keys_of_both_kinds_make_one_chain(tailnet: Tailnet) -> None:
    first = tailnet.key("devbox-1").alg
    second = tailnet.stores["devbox-2"].rotate("EdDSA" if first == "ES256" else "ES256").alg
    tokens = tailnet.chain(["devbox-1", "devbox-2", "target"])
    verified = await tailnet.verify(tokens, caller="devbox-2", this="target")
    assert [header_of(token)["alg"] for token in verified.tokens] == [first, second]


async def test_the_acting_person_is_the_last_hops(tailnet: Tailnet) -> None:
    """An answer relayed from A: A's hop names who answered there."""
    first = tailnet.chain(["devbox-1", "devbox-2"])
    tokens = extend(
        first, tailnet.key("devbox-2"), jku("devbox-2"), person="bob@example.com", device="phone",
        node=fqdn("devbox-2"), audience=fqdn("target"), task_id="t", context_id="c", now=NOW,
    )  # fmt: skip
    verified = await tailnet.verify(tokens, caller="devbox-2", this="target")
    assert (verified.person, verified.acting) == (PERSON, "bob@example.com")


async def test_node_names_compare_lower_case_without_the_trailing_dot(tailnet: Tailnet) -> None:
    tokens = tailnet.chain(["devbox-1", "target"])
    verified = await verify_chain(
        tokens, caller_node=fqdn("DevBox-1") + ".", this_node=fqdn("TARGET") + ".",
        keys=tailnet.keys, nonces=tailnet.nonces, now=NOW,
    )  # fmt: skip
    assert verified.caller_node == fqdn("devbox-1")


@pytest.mark.filterwarnings("ignore:EdDSA is deprecated")  # RFC 9864; the card signs EdDSA too
def test_an_independent_jose_implementation_reads_the_documented_shape(tailnet: Tailnet) -> None:
    tokens = tailnet.chain(["devbox-1", "devbox-2", "target"])
    for node, token in zip(["devbox-1", "devbox-2"], tokens, strict=True):
        key = tailnet.key(node)
        public: dict[str, str | list[str]] = {**key.jwk}
        read = jose_jws.deserialize_compact(
            token, jose_jwk.import_key(public), algorithms=[key.alg]
        )
        assert read.protected == {
            "alg": key.alg,
            "kid": key.kid,
            "jku": jku(node),
            "typ": TOKEN_TYPE,
        }
        payload = json.loads(read.payload)
        assert set(payload) == {"sub", "dev", "node", "aud", "task", "ctx", "iat", "nonce", "prev"}
        assert (payload["sub"], payload["dev"], payload["node"]) == (PERSON, "laptop", fqdn(node))
        assert payload["iat"] == int(NOW)
        assert len(base64.urlsafe_b64decode(payload["nonce"] + "==")) == 16
    assert payload_of(tokens[0])["prev"] == ""
    assert payload_of(tokens[1])["prev"] == b64(hashlib.sha256(tokens[0].encode()).digest())


async def test_a_hop_signed_with_another_key_is_refused(tailnet: Tailnet) -> None:
    real = tailnet.key("devbox-1")
    forger = SigningKey(real.kid, real.alg, tailnet.key("devbox-3").key)
    tokens = extend(
        [], forger, jku("devbox-1"), person=PERSON, device="laptop", node=fqdn("devbox-1"),
        audience=fqdn("target"), task_id="t", context_id="c", now=NOW,
    )  # fmt: skip
    reason = await tailnet.refused(tokens, caller="devbox-1", this="target")
    assert reason.startswith(f"hop 1 ({fqdn('devbox-1')}): bad signature")


async def test_a_key_the_peer_has_not_pinned_is_refused(tailnet: Tailnet) -> None:
    """The lookup's refusal comes back naming the hop."""
    stranger = KeyStore(Path(tailnet.stores["devbox-1"].path.parent / "stranger"))
    tokens = extend(
        [], stranger.init(tailnet.key("devbox-1").alg), jku("devbox-1"), person=PERSON,
        device="", node=fqdn("devbox-1"), audience=fqdn("target"), task_id="t",
        context_id="c", now=NOW,
    )  # fmt: skip
    reason = await tailnet.refused(tokens, caller="devbox-1", this="target")
    assert reason.startswith(f"hop 1 ({fqdn('devbox-1')}): no key ")


async def test_an_edited_entry_is_refused(tailnet: Tailnet) -> None:
    tokens = tailnet.chain(["devbox-1", "devbox-2", "target"])
    edited = with_payload(tokens[0], {**payload_of(tokens[0]), "sub": "mallory@example.com"})
    reason = await tailnet.refused([edited, tokens[1]], caller="devbox-2", this="target")
    assert reason.startswith(f"hop 1 ({fqdn('devbox-1')}): bad signature")


async def test_a_reordered_chain_is_refused(tailnet: Tailnet) -> None:
    tokens = tailnet.chain(["devbox-1", "devbox-2", "target"])
    reason = await tailnet.refused(tokens[::-1], caller="devbox-1", this="target")
    assert reason == "hop 1 was edited or the chain reordered"


async def test_a_dropped_middle_hop_is_refused(tailnet: Tailnet) -> None:
    tokens = tailnet.chain(["devbox-1", "devbox-2", "devbox-3", "target"])
    reason = await tailnet.refused([tokens[0], tokens[2]], caller="devbox-3", this="target")
    assert reason == "hop 2 was edited or the chain reordered"


async def test_a_hop_from_another_chain_is_refused(tailnet: Tailnet) -> None:
    """A first hop swapped for another of the same node (another person's)."""
    tokens = tailnet.chain(["devbox-1", "devbox-2", "target"])
    other = tailnet.chain(["devbox-1", "devbox-2"], person="mallory@example.com")
    reason = await tailnet.refused([other[0], tokens[1]], caller="devbox-2", this="target")
    assert reason == "hop 2 was edited or the chain reordered"


async def test_a_replayed_nonce_is_refused_and_a_refused_chain_does_not_use_it(
    tailnet: Tailnet,
) -> None:
    tokens = tailnet.chain(["devbox-1", "target"])
    await tailnet.refused(tokens, caller="devbox-2", this="target")
    await tailnet.verify(tokens, caller="devbox-1", this="target")
    reason = await tailnet.refused(tokens, caller="devbox-1", this="target", now=NOW + 30)
    assert reason == "hop 1's nonce was already used (a replay)"


@pytest.mark.parametrize(
    ("signed", "number"),
    [(NOW - 61, 1), (NOW + 61, 1), (NOW + 3600, 1), (NOW - 61, 2)],
    ids=["last hop old", "last hop ahead", "last hop far ahead", "second hop old"],
)
async def test_a_last_hop_outside_the_window_is_refused(
    tailnet: Tailnet, signed: float, number: int
) -> None:
    path = ["devbox-1", "target"] if number == 1 else ["devbox-1", "devbox-2", "target"]
    tokens = tailnet.chain(path, times={number: signed})
    reason = await tailnet.refused(tokens, caller=path[-2], this="target")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(signed))
    assert reason.startswith(f"hop {number} was signed at {stamp}, outside the 60 s window")


async def test_an_earlier_hop_may_be_old_but_never_ahead(tailnet: Tailnet) -> None:
    """A's task may have run an hour before it delegated; no node signs the future."""
    path = ["devbox-1", "devbox-2", "target"]
    old = await tailnet.verify(
        tailnet.chain(path, times={1: NOW - 3600}), caller="devbox-2", this="target"
    )
    assert old.hops[0].issued_at == int(NOW - 3600)
    reason = await tailnet.refused(
        tailnet.chain(path, times={1: NOW + 120}), caller="devbox-2", this="target"
    )
    assert reason.startswith("hop 1 was signed at ")


async def test_the_window_is_the_setting(tailnet: Tailnet) -> None:
    tokens = tailnet.chain(["devbox-1", "target"], times={1: NOW - 100})
    await tailnet.verify(tokens, caller="devbox-1", this="target", window=120)
    reason = await tailnet.refused(
        tailnet.chain(["devbox-1", "target"], times={1: NOW - 59}),
        caller="devbox-1",
        this="target",
        window=30,
    )
    assert "outside the 30 s window" in reason


async def test_a_loop_is_refused(tailnet: Tailnet) -> None:
    tokens = tailnet.chain(["devbox-1", "devbox-2", "devbox-1", "target"])
    reason = await tailnet.refused(tokens, caller="devbox-1", this="target")
    assert reason == f"a loop: {fqdn('devbox-1')} is in the chain twice"


async def test_a_chain_through_this_node_is_refused(tailnet: Tailnet) -> None:
    tokens = tailnet.chain(["target", "devbox-1", "target"])
    reason = await tailnet.refused(tokens, caller="devbox-1", this="target")
    assert reason == f"a loop: {fqdn('target')} is in the chain twice"


async def test_a_chain_deeper_than_max_depth_is_refused(tailnet: Tailnet) -> None:
    tokens = tailnet.chain(["devbox-1", "devbox-2", "devbox-3", "devbox-4", "target"])
    reason = await tailnet.refused(tokens, caller="devbox-4", this="target")
    assert reason == "the chain is 4 hops, deeper than delegation.max_depth (3)"
    await tailnet.verify(tokens, caller="devbox-4", this="target", max_depth=4)
    assert await tailnet.refused([], caller="devbox-4", this="target") == "the chain is empty"


async def test_a_last_hop_that_is_not_the_caller_is_refused(tailnet: Tailnet) -> None:
    """A chain captured from devbox-1's request, sent on by devbox-3."""
    tokens = tailnet.chain(["devbox-1", "target"])
    reason = await tailnet.refused(tokens, caller="devbox-3", this="target")
    assert (
        reason == f"the hop that calls is {fqdn('devbox-1')}, but the caller is {fqdn('devbox-3')}"
    )


async def test_a_chain_addressed_to_another_node_is_refused(tailnet: Tailnet) -> None:
    tokens = tailnet.chain(["devbox-1", "devbox-2"])
    reason = await tailnet.refused(tokens, caller="devbox-1", this="target")
    assert reason == f"the chain is addressed to {fqdn('devbox-2')}, not this node"
    middle = tailnet.chain(["devbox-1", "devbox-3"])
    tokens = extend(
        middle, tailnet.key("devbox-2"), jku("devbox-2"), person=PERSON, device="laptop",
        node=fqdn("devbox-2"), audience=fqdn("target"), task_id="t", context_id="c", now=NOW,
    )  # fmt: skip
    reason = await tailnet.refused(tokens, caller="devbox-2", this="target")
    assert (
        reason
        == f"hop 1 is addressed to {fqdn('devbox-3')}, but hop 2 comes from {fqdn('devbox-2')}"
    )


async def test_a_key_url_on_another_node_is_refused(tailnet: Tailnet) -> None:
    """devbox-3 cannot sign as devbox-1 by pointing at its own JWKS."""
    hop = hops_of(tailnet.chain(["devbox-1", "target"]))[0]
    token = sign_hop(tailnet.key("devbox-3"), jku("devbox-3"), hop)
    reason = await tailnet.refused([token], caller="devbox-1", this="target")
    assert reason == (
        f"hop 1 ({fqdn('devbox-1')}): bad signature (its key URL {jku('devbox-3')} "
        f"is not on {fqdn('devbox-1')})"
    )


def header_of(token: str) -> dict[str, Any]:
    return api_jws.get_unverified_header(token)


@pytest.mark.parametrize("alg", ["none", "HS256"])
async def test_an_unsigned_or_shared_secret_hop_is_refused(tailnet: Tailnet, alg: str) -> None:
    token = tailnet.chain(["devbox-1", "target"])[0]
    headers = {k: v for k, v in header_of(token).items() if k != "alg"}
    payload = json.dumps(payload_of(token)).encode()
    secret = "" if alg == "none" else tailnet.key("devbox-1").jwk["x"]  # public
    forged = api_jws.encode(payload, secret, algorithm=alg, headers=headers)
    reason = await tailnet.refused([forged], caller="devbox-1", this="target")
    assert reason == f"hop 1 ({fqdn('devbox-1')}): bad signature (alg {alg!r}, not ES256 or EdDSA)"


async def test_a_key_used_with_another_algorithm_is_refused(tailnet: Tailnet) -> None:
    token = tailnet.chain(["devbox-1", "target"])[0]
    key = tailnet.key("devbox-1")
    other = "EdDSA" if key.alg == "ES256" else "ES256"
    _, payload, signature = token.split(".")
    forged = f"{b64(json.dumps({**header_of(token), 'alg': other}).encode())}.{payload}.{signature}"
    reason = await tailnet.refused([forged], caller="devbox-1", this="target")
    assert reason == (
        f"hop 1 ({fqdn('devbox-1')}): bad signature (alg {other}, but key {key.kid} is not "
        f"an {other} key)"
    )


async def test_a_token_of_another_type_is_refused(tailnet: Tailnet) -> None:
    token = tailnet.chain(["devbox-1", "target"])[0]
    key = tailnet.key("devbox-1")
    headers = {**header_of(token), "typ": "JWT"}
    forged = api_jws.encode(
        json.dumps(payload_of(token)).encode(), key.key, algorithm=key.alg, headers=headers
    )
    reason = await tailnet.refused([forged], caller="devbox-1", this="target")
    assert reason == f"hop 1 ({fqdn('devbox-1')}): bad signature (typ 'JWT', not {TOKEN_TYPE})"


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"role": "admin"}, "its payload has"),
        ({"iat": "1800000000"}, "wrong types in its payload (iat)"),
        ({"sub": None}, "wrong types in its payload (sub)"),
        ({"nonce": "x"}, "its nonce is not 16 bytes of base64url"),
    ],
)
async def test_a_signed_entry_of_another_shape_is_refused(
    tailnet: Tailnet, change: dict[str, Any], why: str
) -> None:
    token = tailnet.chain(["devbox-1", "target"])[0]
    key = tailnet.key("devbox-1")
    payload = json.dumps({**payload_of(token), **change}).encode()
    forged = api_jws.encode(payload, key.key, algorithm=key.alg, headers=header_of(token))
    reason = await tailnet.refused([forged], caller="devbox-1", this="target")
    assert reason.startswith(f"hop 1 is not an actor chain entry: {why}")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "entry 1 of the A2A-Actor-Chain header is not a JWS"),
        ("a.b", "entry 1 of the A2A-Actor-Chain header is not a JWS"),
        ("a.b.c,,a.b.c", "entry 2 of the A2A-Actor-Chain header is not a JWS"),
        ("a.b.c d", "entry 1 of the A2A-Actor-Chain header is not a JWS"),
        (",".join(["a.b.c"] * 17), "the A2A-Actor-Chain header has 17 entries, more than 16"),
        ("a.b." + "c" * 8192, "the A2A-Actor-Chain header is 8196 bytes, more than 8 KiB"),
    ],
    ids=["empty", "two parts", "empty entry", "space inside", "17 entries", "over 8 KiB"],
)
def test_a_junk_header_is_refused(value: str, reason: str) -> None:
    with pytest.raises(ChainRefused) as refusal:
        parse_header(value)
    assert str(refusal.value) == reason


def test_a_header_splits_into_its_tokens(tailnet: Tailnet) -> None:
    tokens = tailnet.chain(["devbox-1", "devbox-2", "target"])
    assert parse_header(" , ".join(tokens)) == tokens


async def test_a_well_formed_but_undecodable_token_is_refused(tailnet: Tailnet) -> None:
    reason = await tailnet.refused(["a.b.c"], caller="devbox-1", this="target")
    assert reason.startswith("hop 1 is not an actor chain entry: ")


async def test_nonces_are_kept_for_twice_the_window_and_bounded(tmp_path: Path) -> None:
    database = open_database(f"sqlite+aiosqlite:///{tmp_path / 'store.db'}")
    try:
        nonces = HopNonces(database, 60, limit=2)
        assert await nonces.use("one", NOW) and await nonces.use("two", NOW + 10)
        assert not await nonces.use("one", NOW + 119)
        with pytest.raises(NoncesFull, match="more than 2 delegated requests within 120 s"):
            await nonces.use("three", NOW + 119)
        # "one" has aged out; its token is refused by time
        assert await nonces.use("three", NOW + 120)
        assert not await nonces.use("two", NOW + 129)
        assert await nonces.use("one", NOW + 131)
        # Kept in the file: the same store opened again (a restart) still knows them.
        reopened = open_database(database.url)
        assert not await HopNonces(reopened, 60, limit=2).use("three", NOW + 131)
        await reopened.aclose()
    finally:
        await database.aclose()


def test_extend_signs_with_a_fresh_nonce_and_the_time(tailnet: Tailnet) -> None:
    before = int(time.time())
    first = tailnet.chain(["devbox-1", "target"])
    again = tailnet.chain(["devbox-1", "target"])
    assert hops_of(first)[0].nonce != hops_of(again)[0].nonce
    now = extend(
        [], tailnet.key("devbox-1"), jku("devbox-1"), person=PERSON, device="",
        node=fqdn("devbox-1"), audience=fqdn("target"), task_id="t", context_id="c",
    )  # fmt: skip
    assert before <= hops_of(now)[0].issued_at <= int(time.time())


def test_a_hop_round_trips(tailnet: Tailnet) -> None:
    hop = Hop(PERSON, "laptop", fqdn("devbox-1"), fqdn("target"), "t", "c", int(NOW), "A" * 22, "")
    assert hops_of([sign_hop(tailnet.key("devbox-1"), jku("devbox-1"), hop)]) == [hop]
