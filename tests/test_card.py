"""The agent card: a strict 1.0 variant for 1.0 clients, a 0.3-compatible one for the rest."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.a2a_helpers import A2A
from tests.conftest import start_server

CARD = "/.well-known/agent-card.json"
V03_FIELDS = {"url", "protocolVersion", "preferredTransport", "additionalInterfaces"}


async def get_card(url: str, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.get(url + CARD, headers=headers)


async def test_a_1_0_client_gets_the_strict_card(a2a: A2A) -> None:
    response = await get_card(a2a.url, **{"A2A-Version": "1.0"})
    card = response.json()
    assert not V03_FIELDS & set(card)
    assert {i["protocolVersion"] for i in card["supportedInterfaces"]} == {"1.0"}
    assert {i["protocolBinding"] for i in card["supportedInterfaces"]} == {"JSONRPC", "HTTP+JSON"}
    assert all(i["url"] == a2a.url for i in card["supportedInterfaces"])


async def test_other_clients_also_find_the_0_3_interfaces(a2a: A2A) -> None:
    card = (await get_card(a2a.url)).json()
    assert set(card) >= V03_FIELDS
    assert card["url"] == a2a.url
    versions = {(i["protocolBinding"], i["protocolVersion"]) for i in card["supportedInterfaces"]}
    assert ("JSONRPC", "0.3") in versions and ("JSONRPC", "1.0") in versions


async def test_card_has_caching_headers_and_describes_the_agent(a2a: A2A) -> None:
    response = await get_card(a2a.url)
    assert "max-age=" in response.headers["cache-control"]
    assert response.headers["last-modified"].endswith("GMT")
    card = response.json()
    assert card["capabilities"]["streaming"] is True
    (skill,) = card["skills"]
    assert skill["id"] == "echo" and "slow N" in skill["description"]
    assert "echo" in card["description"]


async def test_card_etag_revalidates_with_304(a2a: A2A) -> None:
    first = await get_card(a2a.url, **{"A2A-Version": "1.0"})
    etag = first.headers["etag"]
    again = await get_card(a2a.url, **{"A2A-Version": "1.0", "If-None-Match": etag})
    assert again.status_code == 304
    legacy = await get_card(a2a.url, **{"If-None-Match": etag})
    assert legacy.status_code == 200 and legacy.headers["etag"] != etag


async def test_card_without_0_3_fields_when_configured(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("card_lists_0_3 = false\n")
    running = start_server(tmp_path, "--config", str(config))
    try:
        card = (await get_card(running.url)).json()
        assert not V03_FIELDS & set(card)
    finally:
        running.stop()
