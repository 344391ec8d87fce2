"""The AI Catalog beside the card (card/catalog.py): the agent listed to whom the
policy lets in and to the nodes delegation.allowed_nodes names, an empty list (never a
refusal) to anyone else, and `tailagent peers` reading it."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tailagent.agents.events import DelegationFailed
from tailagent.card.verify import KnownAgents
from tailagent.delegation.directory import PeerDirectory
from tailagent.tailnet.localapi import LocalAPI
from tests.conftest import RunningServer, start_server
from tests.tailnet import OWNER, FakeTailscaled, status, whois
from tests.warm_start import cli_run

CATALOG = "/.well-known/ai-catalog.json"
CONFIG = """
[access]
allowed_logins = ["alice@example.com"]

[delegation]
allowed_nodes = ["tag:build", "devbox-1"]
"""


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeTailscaled]:
    tailscaled = FakeTailscaled(tmp_path_factory.mktemp("tailscaled")).start()
    tailscaled.peers = {
        "100.64.0.9": whois(OWNER, name="owner-laptop", ip="100.64.0.9"),
        "100.64.0.10": whois("mallory@example.com", ip="100.64.0.10"),
        "100.64.0.11": whois(tags=("tag:build",), name="runner", ip="100.64.0.11"),
        "100.64.0.12": whois(tags=("tag:ci",), name="devbox-1", ip="100.64.0.12"),
        "100.64.0.13": whois(tags=("tag:ci",), name="devbox-3", ip="100.64.0.13"),
    }
    tailscaled.write()
    yield tailscaled
    tailscaled.stop()


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory, fake: FakeTailscaled) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("catalog")
    config = tmp / "tailagent.toml"
    config.write_text(CONFIG)
    server = start_server(tmp, "--config", str(config), "--tailscale-socket", str(fake.socket))
    yield server
    server.stop()


def catalog_as(server: RunningServer, address: str | None) -> httpx.Response:
    """The catalog as the tailnet device at `address` sees it through tailscale serve
    (None: a local connection with no credentials)."""
    headers = {"X-Forwarded-For": address} if address else {}
    return httpx.get(server.url + CATALOG, headers=headers)


def entries(response: httpx.Response) -> list[dict[str, Any]]:
    assert response.status_code == 200, response.text
    listed: list[dict[str, Any]] = response.json()["entries"]
    return listed


def test_the_owner_sees_the_agent_with_its_card_and_interfaces(box: RunningServer) -> None:
    response = catalog_as(box, "100.64.0.9")
    assert response.headers["content-type"] == "application/ai-catalog+json"
    assert "no-store" in response.headers["cache-control"]
    assert "user:owner@example.com (tailscale serve)" in box.last_access_line()
    body = response.json()
    assert body["specVersion"] == "1.0"
    card = httpx.get(box.url + "/.well-known/agent-card.json", headers={"A2A-Version": "1.0"})
    card_json = card.json()
    assert body["host"] == {"displayName": card_json["name"], "identifier": "127.0.0.1"}
    (entry,) = body["entries"]
    assert entry["type"] == "application/a2a-agent-card+json"
    assert entry["identifier"] == "urn:air:127.0.0.1:a2a:tailagent"
    assert entry["url"] == box.url + "/.well-known/agent-card.json"
    assert entry["displayName"] == card_json["name"]
    assert entry["description"] == card_json["description"]
    ours = entry["extensions"]["tailagent"]
    assert ours["interfaces"] == card_json["supportedInterfaces"]
    assert ours["acceptsDelegation"] is False  # the owner's laptop hands no work here


def test_a_stranger_gets_an_empty_list_not_a_refusal(box: RunningServer) -> None:
    for address in ("100.64.0.10", "100.64.0.13", None):
        response = catalog_as(box, address)
        assert response.json() == {
            "specVersion": "1.0",
            "host": response.json()["host"],
            "entries": [],
        }, address
    # The card itself stays public.
    assert httpx.get(box.url + "/.well-known/agent-card.json").status_code == 200


def test_the_nodes_delegation_allows_see_that_they_may_hand_work_here(
    box: RunningServer,
) -> None:
    for address in ("100.64.0.11", "100.64.0.12"):  # by its tag; by its short name
        (entry,) = entries(catalog_as(box, address))
        assert entry["extensions"]["tailagent"]["acceptsDelegation"] is True, address
    # Such a node sees the catalog, and is let in nowhere else for it.
    refused = httpx.post(
        box.url + "/",
        headers={"X-Forwarded-For": "100.64.0.11", "A2A-Version": "1.0"},
        json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
    )
    assert refused.status_code == 403


def test_the_local_token_sees_the_agent(box: RunningServer) -> None:
    response = httpx.get(box.url + CATALOG, headers={"Authorization": f"Bearer {box.token}"})
    assert len(entries(response)) == 1


def test_tailscaled_down_is_still_an_answer(box: RunningServer, fake: FakeTailscaled) -> None:
    fake.down = True
    fake.write()
    try:
        assert entries(catalog_as(box, "100.64.0.9")) == []
    finally:
        fake.down = False
        fake.write()


@pytest.fixture(scope="module")
def peer(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[RunningServer, FakeTailscaled]]:
    """A box B, and a tailscaled (of box A) whose one online peer is B. B lets a local
    caller in without a token: the CLI's connection is one."""
    tmp = tmp_path_factory.mktemp("peer")
    config = tmp / "c.toml"
    config.write_text('name = "box-b"\n[access]\nlocal_without_token = true\n')
    server = start_server(tmp, "--config", str(config))
    fake = FakeTailscaled(tmp / "ts").start()
    online = {"Online": True, "UserID": 1, "TailscaleIPs": ["100.64.0.2"], "DNSName": "127.0.0.1."}
    state = {**status(), "Peer": {"b": online}}
    fake.config.write_text(json.dumps({"status": state, "whois": {}}))
    yield server, fake
    fake.stop()
    server.stop()


def test_peers_reads_the_catalog(
    peer: tuple[RunningServer, FakeTailscaled], tmp_path: Path
) -> None:
    """`tailagent peers` lists what each peer's catalog lists to this box."""
    server, fake = peer
    port = str(urlsplit(server.url).port)
    where = ("--scheme", "http", "--port", port, "--tailscale-socket", str(fake.socket))
    env = {**os.environ, "TAILAGENT_KNOWN_AGENTS": str(tmp_path / "k.json")}
    run = [sys.executable, "-m", "tailagent", "peers"]
    done = cli_run([*run, "--json", *where], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    (row,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert row["agents"] == ["box-b"] and row["delegation"] is False
    assert row["signature"].startswith("valid")
    table = cli_run([*run, *where], capture_output=True, text=True, env=env)
    assert "delegation" in table.stdout and "box-b" in table.stdout


async def test_the_directory_finds_a_peer_by_its_names(
    peer: tuple[RunningServer, FakeTailscaled], tmp_path: Path
) -> None:
    """What box A's agent hands work to: a peer named by host, MagicDNS name or URL;
    a name that is none of them is refused naming the peers there are."""
    server, fake = peer
    localapi = LocalAPI.tailscaled(fake.socket)
    known = KnownAgents(tmp_path / "k.json")
    directory = PeerDirectory(localapi, known, scheme="http", port=urlsplit(server.url).port)
    try:
        for name in ("127.0.0.1", "127.0.0.1.", server.url, server.url + "/"):
            assert (await directory.find(name)).url == server.url, name
        with pytest.raises(DelegationFailed) as refused:
            await directory.find("devbox-9")
        assert str(refused.value) == (
            "no tailagent 'devbox-9' on the tailnet whose card verifies; the peers there are: 127"
        )
    finally:
        await localapi.aclose()
