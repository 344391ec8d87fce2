"""The signed card: a2a-sdk's verifier, an independent JOSE implementation, tampering,
rotation, pinning, and discovery across the (fake) tailnet."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types.a2a_pb2 import AgentCard
from a2a.utils.signing import (
    InvalidSignaturesError,
    create_agent_card_signer,
    create_signature_verifier,
)
from cryptography.hazmat.primitives.asymmetric import ec
from google.protobuf.json_format import MessageToDict, ParseDict
from joserfc import jwk as jose_jwk
from joserfc import jws as jose_jws
from jwt import PyJWK

from tailagent.card.keys import KEYS_FILE, KeyStore, public_jwk, thumbprint
from tests.conftest import RunningServer, start_server
from tests.tailnet import FakeTailscaled, status
from tests.warm_start import cli_run

CARD = "/.well-known/agent-card.json"
JWKS = "/.well-known/jwks.json"
NAME = "tailägent — 日本の箱 ✓"


def tailagent(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return cli_run(
        [sys.executable, "-m", "tailagent", *args],
        capture_output=True, text=True, timeout=30, env=env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("signed")
    config = tmp / "c.toml"
    config.write_text(f'name = "{NAME}"\n')
    server = start_server(tmp, "--config", str(config))
    yield server
    server.stop()


def get(url: str, path: str, **headers: str) -> dict[str, Any]:
    response = httpx.get(url + path, headers=headers)
    response.raise_for_status()
    data: dict[str, Any] = response.json()
    return data


def as_card(card: dict[str, Any]) -> AgentCard:
    return ParseDict(card, AgentCard(), ignore_unknown_fields=True)


def sdk_verify(card: dict[str, Any], keys: list[dict[str, Any]]) -> None:
    by_kid = {k["kid"]: k for k in keys}
    verifier = create_signature_verifier(lambda kid, jku: PyJWK(by_kid[kid]), ["ES256", "EdDSA"])
    verifier(as_card(card))


def jcs(value: Any) -> str:
    """RFC 8785 for what a card holds (strings, booleans, objects, arrays; no numbers)."""
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: kv[0].encode("utf-16-be"))
        return "{" + ",".join(f"{jcs(k)}:{jcs(v)}" for k, v in items) + "}"
    if isinstance(value, list):
        return "[" + ",".join(jcs(v) for v in value) + "]"
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"a card holds no {type(value).__name__}")


def test_both_card_variants_verify_with_a2a_sdk(signed: RunningServer) -> None:
    keys = get(signed.url, JWKS)["keys"]
    strict = get(signed.url, CARD, **{"A2A-Version": "1.0"})
    legacy = get(signed.url, CARD)
    assert "url" in legacy and "url" not in strict
    for card in (strict, legacy):
        header = json.loads(base64.urlsafe_b64decode(card["signatures"][0]["protected"] + "=="))
        assert header["alg"] == "ES256" and header["typ"] == "JOSE"
        assert header["jku"] == signed.url + JWKS
        assert header["kid"] == keys[0]["kid"] == thumbprint(keys[0])
        sdk_verify(card, keys)


def test_an_independent_jose_implementation_agrees(signed: RunningServer) -> None:
    card = get(signed.url, CARD, **{"A2A-Version": "1.0"})
    assert card["name"] == NAME
    (signature,) = card.pop("signatures")
    payload = base64.urlsafe_b64encode(jcs(card).encode()).rstrip(b"=").decode()
    token = f"{signature['protected']}.{payload}.{signature['signature']}"
    key = jose_jwk.ECKey.import_key(get(signed.url, JWKS)["keys"][0])
    verified = jose_jws.deserialize_compact(token, key, algorithms=["ES256"])
    assert json.loads(verified.payload) == card


@pytest.mark.parametrize(
    "tamper",
    [
        lambda c: c.update(name="someone else"),
        lambda c: c["skills"][0].update(description="does anything"),
        lambda c: c["supportedInterfaces"][0].update(url="https://evil.example"),
        lambda c: c["capabilities"].update(pushNotifications=False),
    ],
    ids=["name", "skill", "interface", "capability"],
)
def test_any_change_to_the_card_breaks_the_signature(signed: RunningServer, tamper: Any) -> None:
    card = get(signed.url, CARD, **{"A2A-Version": "1.0"})
    tamper(card)
    with pytest.raises(InvalidSignaturesError):
        sdk_verify(card, get(signed.url, JWKS)["keys"])


def test_a_signature_from_another_key_is_rejected(signed: RunningServer) -> None:
    card = get(signed.url, CARD, **{"A2A-Version": "1.0"})
    kid = card.pop("signatures")[0]
    forged = as_card(card)
    other = ec.generate_private_key(ec.SECP256R1())
    header = json.loads(base64.urlsafe_b64decode(kid["protected"] + "=="))
    create_agent_card_signer(other, header)(forged)  # type: ignore[arg-type]
    with pytest.raises(InvalidSignaturesError):
        sdk_verify(MessageToDict(forged), get(signed.url, JWKS)["keys"])


def test_keys_init_rotate_and_the_grace_period(tmp_path: Path) -> None:
    made = tailagent("keys", "init", "--alg", "EdDSA", "--state-dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    path = tmp_path / KEYS_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    store = KeyStore(tmp_path)
    first = store.current()
    assert first.alg == "EdDSA" and first.kid == thumbprint(public_jwk(first.key))
    assert tailagent("keys", "init", "--state-dir", str(tmp_path)).returncode == 1
    assert tailagent("keys", "rotate", "--state-dir", str(tmp_path)).returncode == 0
    second = store.current()
    assert second.kid != first.kid and second.alg == "EdDSA"
    assert [k["kid"] for k in store.jwks()["keys"]] == [second.kid, first.kid]
    # Past its grace period the old key leaves the JWKS.
    data = json.loads(path.read_text())
    data["retired"][0]["until"] = (datetime.now(UTC) - timedelta(minutes=1)).isoformat()
    path.write_text(json.dumps(data))
    assert [k["kid"] for k in store.jwks()["keys"]] == [second.kid]


async def test_rotation_on_a_running_server(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        before = get(server.url, CARD, **{"A2A-Version": "1.0"})
        assert tailagent("keys", "rotate", "--state-dir", str(server.state_dir)).returncode == 0
        after = get(server.url, CARD, **{"A2A-Version": "1.0"})
        keys = get(server.url, JWKS)["keys"]
        assert len(keys) == 2  # the new key signs; the old one still verifies
        for card in (before, after):
            sdk_verify(card, keys)
        assert after["signatures"][0]["protected"] != before["signatures"][0]["protected"]
    finally:
        server.stop()


def test_pinning_first_contact_same_key_changed_key_and_re_trust(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    env = {**os.environ, "TAILAGENT_KNOWN_AGENTS": str(tmp_path / "known.json")}
    try:
        first = tailagent("card", server.url, env=env)
        assert first.returncode == 0 and "valid (key from jku, not pinned)" in first.stdout
        trusted = tailagent("card", server.url, "--trust", env=env)
        assert "valid (pinned)" in trusted.stdout
        same = tailagent("card", server.url, env=env)
        assert same.returncode == 0 and "valid (pinned)" in same.stdout
        KeyStore(server.state_dir).rotate()  # as `keys rotate` (tested above), in-process
        changed = tailagent("card", server.url, env=env)
        assert changed.returncode == 1
        assert "INVALID: the card is not signed by the key pinned" in changed.stdout
        # A client that cannot read the server's state dir is stopped; this box's own
        # CLI, which can, follows the rotation its state dir made (and says so).
        elsewhere = {**env, "TAILAGENT_STATE_DIR": str(tmp_path / "another")}
        call = tailagent("call", "hi", "--url", server.url, "--token", "x", env=elsewhere)
        assert call.returncode == 2 and "INVALID" in call.stderr
        own = {**env, "TAILAGENT_STATE_DIR": str(server.state_dir)}
        call = tailagent("call", "hi", "--url", server.url, env=own)
        assert call.returncode == 0, call.stderr
        assert "signs with a new key (`keys rotate` in" in call.stderr
        assert "valid (pinned)" in tailagent("card", server.url, env=env).stdout
        KeyStore(server.state_dir).rotate()
        again = tailagent("card", server.url, "--trust", env=env)
        assert again.returncode == 0 and "valid (pinned)" in again.stdout
        call = tailagent(
            "call",
            "hi",
            "--url",
            server.url,
            "--require-signed",
            env={**env, "TAILAGENT_STATE_DIR": str(server.state_dir)},
        )
        assert call.returncode == 0, call.stderr
    finally:
        server.stop()


def test_require_signed_refuses_an_unpinned_card(signed: RunningServer, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TAILAGENT_KNOWN_AGENTS": str(tmp_path / "none.json"),
        "TAILAGENT_STATE_DIR": str(signed.state_dir),
    }
    call = tailagent("call", "hi", "--url", signed.url, "--require-signed", env=env)
    assert call.returncode == 2
    assert "--require-signed wants a pinned key" in call.stderr


def test_peers_lists_the_signed_agents_of_the_tailnet(
    signed: RunningServer, tmp_path: Path
) -> None:
    fake = FakeTailscaled(tmp_path / "ts").start()
    try:
        port = signed.url.rsplit(":", 1)[1]
        peer = {"Online": True, "UserID": 1, "TailscaleIPs": ["100.64.0.2"]}
        extra = {
            # The card's key URL must be on the card's own origin: the peer's name is the
            # host the server advertises.
            "agent": {**peer, "DNSName": "127.0.0.1."},
            "no-agent": {**peer, "DNSName": "127.0.0.3."},
            "offline": {**peer, "DNSName": "127.0.0.1.", "Online": False},
            "ci": {**peer, "DNSName": "127.0.0.1.", "Tags": ["tag:ci"], "UserID": 9},
        }
        state = {**status(), "Peer": extra}
        fake.config.write_text(json.dumps({"status": state, "whois": {}}))
        env = {**os.environ, "TAILAGENT_KNOWN_AGENTS": str(tmp_path / "k.json")}
        where = ("--scheme", "http", "--port", port, "--tailscale-socket", str(fake.socket))
        result = tailagent("peers", "--json", *where, env=env)
        assert result.returncode == 0, result.stderr
        rows = [json.loads(line) for line in result.stdout.splitlines()]
        assert [r["peer"] for r in rows] == ["127.0.0.1", "127.0.0.1"]
        assert {r["owner"] for r in rows} == {"owner@example.com", "tag:ci"}
        assert all(r["name"] == NAME and r["signature"].startswith("valid") for r in rows)
        table = tailagent("peers", *where, env=env)
        assert "127.0.0.1" in table.stdout and "valid (key from jku" in table.stdout
    finally:
        fake.stop()


def test_a_damaged_key_file_stops_the_start_saying_what_to_do(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / KEYS_FILE).write_text("not json")
    done = cli_run(
        [sys.executable, "-m", "tailagent", "serve", "--state-dir", str(state),
         "--listen", "127.0.0.1:0", "--agent", "echo", "--cwd", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"tailagent: cannot sign the agent card: {state / KEYS_FILE} is not")
    assert "remove it to have a new key made" in last
    assert (state / KEYS_FILE).read_text() == "not json"  # nothing of it is lost
