"""Checking another agent's card: its signature, its key, and what we pinned for it.

Like ssh's known_hosts: the first time, a key can be trusted (pinned) for a URL;
from then on a card from that URL must be signed by that key, and a different
key is refused, loudly, until the user trusts it again.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from a2a.types.a2a_pb2 import AgentCard
from google.protobuf.json_format import ParseDict

from tailagent.statedir.files import write_private

CARD_PATH = "/.well-known/agent-card.json"
ALGORITHMS = ["ES256", "EdDSA"]


def known_agents_path() -> Path:
    if os.environ.get("TAILAGENT_KNOWN_AGENTS"):
        return Path(os.environ["TAILAGENT_KNOWN_AGENTS"])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tailagent" / "known_agents.json"


class KnownAgents:
    """URL -> the key pinned for it. A person's pins (`tailagent card --trust`) follow
    no rotation: a changed key is theirs to trust again, as ssh's changed host key."""

    follows_rotation = False
    pins_first_use = False  # `tailagent peers` pins nothing; `card --trust` does

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or known_agents_path()

    def _read(self) -> dict[str, Any]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def get(self, url: str) -> dict[str, Any] | None:
        return self._read().get(url.rstrip("/"))

    def pin(self, url: str, jwk: dict[str, Any]) -> None:
        data = self._read()
        data[url.rstrip("/")] = {"jwk": jwk, "trusted": datetime.now(UTC).isoformat()}
        write_private(self.path, json.dumps(data, indent=2, sort_keys=True) + "\n")


@dataclass(frozen=True)
class Verdict:
    status: str  # "valid (pinned)", "valid (key from jku, not pinned)", "unsigned", "INVALID: ..."
    jwk: dict[str, Any] | None = None  # the key that verified it

    @property
    def valid(self) -> bool:
        return self.status.startswith("valid")

    @property
    def pinned(self) -> bool:
        return self.status == "valid (pinned)"


def _protected(signature: dict[str, Any]) -> dict[str, Any]:
    raw = str(signature.get("protected", ""))
    try:
        header = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (ValueError, TypeError):
        return {}
    return header if isinstance(header, dict) else {}


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, parts.hostname, parts.port or default


def _same_origin(a: str, b: str) -> bool:
    return _origin(a) == _origin(b)


def _as_card(card_json: dict[str, Any]) -> AgentCard:
    return ParseDict(card_json, AgentCard(), ignore_unknown_fields=True)


def _check(card: AgentCard, jwk: dict[str, Any]) -> bool:
    # Loaded here, with the first card checked: PyJWT brings cryptography, which a
    # server that checks no card never holds (tests/test_at_rest.py).
    from a2a.utils.signing import SignatureVerificationError, create_signature_verifier
    from jwt import PyJWK

    verify = create_signature_verifier(lambda kid, jku: PyJWK(jwk), ALGORITHMS)
    try:
        verify(card)
    except SignatureVerificationError:
        return False
    return True


async def _rotated_from(
    pinned: dict[str, Any],
    card: AgentCard,
    header: dict[str, Any],
    url: str,
    http: httpx.AsyncClient,
) -> dict[str, Any] | None:
    """The key the card is signed with, when it is a rotation of the pinned one: the
    agent's own key set (`jku` on the card's origin) lists both, the agent vouching for
    its new key while the old one is in its grace (`tailagent keys rotate` keeps it 7
    days). None otherwise: a key that replaced the pinned one outright stays refused."""
    jku = header.get("jku")
    if not isinstance(jku, str) or not _same_origin(jku, url):
        return None
    try:
        response = await http.get(jku)
        response.raise_for_status()
        keys = [k for k in response.json().get("keys", []) if isinstance(k, dict)]
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    members = ("kty", "crv", "x", "y")
    if not any(all(k.get(m) == pinned.get(m) for m in members) for k in keys):
        return None
    new = next((k for k in keys if k.get("kid") == header.get("kid")), None)
    return new if new is not None and _check(card, new) else None


async def verify_card(
    card_json: dict[str, Any],
    url: str,
    http: httpx.AsyncClient,
    pinned: dict[str, Any] | None,
    follow_rotation: bool = False,
) -> Verdict:
    """Checks the card against the key pinned for its URL, or else against the key its
    signature names (`jku`, which must be on the same origin as the card).
    `follow_rotation`: a card signed with a rotation of the pinned key passes too (the
    pins of KnownAgents.follows_rotation)."""
    signatures = card_json.get("signatures") or []
    if not signatures:
        return Verdict("unsigned")
    card = _as_card(card_json)
    header = _protected(signatures[0])
    if pinned is not None:
        jwk = pinned["jwk"]
        if _check(card, jwk):
            return Verdict("valid (pinned)", jwk)
        if follow_rotation and (rotated := await _rotated_from(jwk, card, header, url, http)):
            return Verdict("valid (pinned)", rotated)
        return Verdict(
            f"INVALID: the card is not signed by the key pinned for {url} "
            f"(pinned kid {jwk.get('kid')}, card kid {header.get('kid')}): the agent's key "
            "changed, or this is not the agent you trusted. Check, then re-trust with --trust"
        )
    jku = header.get("jku")
    if not isinstance(jku, str) or not _same_origin(jku, url):
        return Verdict(f"INVALID: the signature's key URL {jku!r} is not on {url}")
    try:
        response = await http.get(jku)
        response.raise_for_status()
        keys = response.json().get("keys", [])
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        return Verdict(f"INVALID: cannot fetch the signing keys from {jku}: {exc}")
    jwk = next((k for k in keys if k.get("kid") == header.get("kid")), None)
    if jwk is None:
        return Verdict(f"INVALID: no key {header.get('kid')} in {jku}")
    if not _check(card, jwk):
        return Verdict("INVALID: the signature does not match the card")
    return Verdict("valid (key from jku, not pinned)", jwk)


async def fetch_card(url: str, http: httpx.AsyncClient) -> dict[str, Any]:
    response = await http.get(url.rstrip("/") + CARD_PATH, headers={"A2A-Version": "1.0"})
    response.raise_for_status()
    card: dict[str, Any] = response.json()
    return card
