"""A captured delegated request is used once: refused by box B after B restarts, and by
every other server sharing B's store (issue 55, section 2).

Real servers whose tailscaled (tests/fake_tailscaled.py) names the caller devbox-1,
which may hand work in for alice; devbox-1's key is pinned in each server's state dir,
so no key is fetched. The nonces live in the store: SQLite for one server across its
restart, a real PostgreSQL for two servers at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tailagent.card.keys import KeyStore, SigningKey
from tests.conftest import RunningServer, start_server
from tests.postgres import postgres_missing, running_postgres
from tests.tailnet import FakeTailscaled, send_message, whois
from tests.test_delegation_inbound import ADDRESSES, ALICE, CAPABILITY, chain, pin, reason, send

REPLAY = "actor chain refused: hop 1's nonce was already used (a replay)"


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeTailscaled]:
    tailscaled = FakeTailscaled(tmp_path_factory.mktemp("tailscaled"))
    tailscaled.peers[ADDRESSES["devbox-1"]] = whois(
        "builder@example.com", name="devbox-1", ip=ADDRESSES["devbox-1"]
    )
    yield tailscaled.start()
    tailscaled.stop()


@pytest.fixture(scope="module")
def box_a(tmp_path_factory: pytest.TempPathFactory) -> SigningKey:
    return KeyStore(tmp_path_factory.mktemp("devbox-1")).init()


def serve_b(tmp: Path, fake: FakeTailscaled, key: SigningKey, *extra: str) -> list[str]:
    """The arguments of a box B letting devbox-1 hand work in for alice, its key
    pinned in `tmp`'s state dir; `extra`: more arguments (a shared store)."""
    config = tmp / "tailagent.toml"
    tmp.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f'[access]\nallowed_logins = ["{ALICE}"]\ncapability = "{CAPABILITY}"\n'
        '[delegation]\nallowed_nodes = ["devbox-1"]\n'
    )
    pin(tmp / "state", key)
    return ["--config", str(config), "--tailscale-socket", str(fake.socket), *extra]


def accepted(server: RunningServer, tokens: list[str], text: str) -> None:
    status, body = send(server, tokens, send_message(text))
    assert status == 200, body


def refused_as_replay(server: RunningServer, tokens: list[str], text: str) -> None:
    status, body = send(server, tokens, send_message(text))
    assert (status, reason(body)) == (403, REPLAY), body
    assert "refused: actor chain refused: hop 1's nonce was already used" in (
        server.last_access_line()
    )


def test_a_chain_accepted_before_a_restart_is_refused_after_it(
    tmp_path: Path, fake: FakeTailscaled, box_a: SigningKey
) -> None:
    args = serve_b(tmp_path, fake, box_a)
    server = start_server(tmp_path, *args)
    captured = chain(box_a)
    try:
        accepted(server, captured, "before the restart")
        server.stop()
        server = start_server(tmp_path, *args, state_dir=server.state_dir)
        refused_as_replay(server, captured, "after the restart")
        # The restarted box still takes a fresh hop of the same node.
        accepted(server, chain(box_a), "a fresh one")
    finally:
        server.stop()


@pytest.mark.skipif(postgres_missing() is not None, reason=postgres_missing() or "")
def test_a_chain_accepted_by_one_server_is_refused_by_another_on_its_store(
    tmp_path: Path, fake: FakeTailscaled, box_a: SigningKey
) -> None:
    with running_postgres() as postgres:
        first = start_server(tmp_path / "b1", *serve_b(tmp_path / "b1", fake, box_a,
                                                       "--store", postgres.url))  # fmt: skip
        second = start_server(tmp_path / "b2", *serve_b(tmp_path / "b2", fake, box_a,
                                                        "--store", postgres.url))  # fmt: skip
        try:
            captured = chain(box_a)
            accepted(first, captured, "on the first server")
            refused_as_replay(second, captured, "on the second server")
            refused_as_replay(first, captured, "on the first again")
            # Two servers at once, one fresh chain: exactly one of them takes it.
            again = chain(box_a)
            with ThreadPoolExecutor(2) as pool:
                sent = [
                    pool.submit(send, server, again, send_message(f"race {n}"))
                    for n, server in enumerate((first, second))
                ]
            assert sorted(done.result()[0] for done in sent) == [200, 403]
        finally:
            first.stop()
            second.stop()
