"""The signed card in its two variants, and the JWKS that verifies it.

Both variants are signed (A2A 1.0, section 8.4: a JWS over the RFC 8785 form of
the card without `signatures`, through a2a-sdk's signer), once, and again only
when the key changes: `tailagent keys rotate` takes effect without a restart.
"""

from __future__ import annotations

import hashlib
import json
from email.utils import formatdate
from typing import Any, NamedTuple

from a2a.types.a2a_pb2 import AgentCard
from a2a.utils.signing import create_agent_card_signer

from tailagent.agents.events import AgentBackend
from tailagent.card.builder import build_card, card_json
from tailagent.card.keys import KeyStore, SigningKey

JWKS_PATH = "/.well-known/jwks.json"


class CardVariant(NamedTuple):
    """One serialised card and its validator."""

    body: str
    etag: str

    @classmethod
    def of(cls, card: dict[str, Any]) -> CardVariant:
        body = json.dumps(card, ensure_ascii=False)
        return cls(body, '"' + hashlib.sha256(body.encode()).hexdigest()[:32] + '"')


def sign(card: AgentCard, key: SigningKey, jku: str) -> AgentCard:
    signer = create_agent_card_signer(
        key.key,  # type: ignore[arg-type]  # PyJWT takes cryptography keys as well
        {"alg": key.alg, "kid": key.kid, "typ": "JOSE", "jku": jku},
    )
    return signer(card)


class CardPublisher:
    def __init__(
        self, backend: AgentBackend, url: str, name: str, keys: KeyStore, lists_0_3: bool
    ) -> None:
        self._backend = backend
        self._url = url
        self._name = name
        self._keys = keys
        self._lists_0_3 = lists_0_3
        self._signed_at = -1
        self.strict = self.legacy = CardVariant("", "")
        self.jwks = ""
        self.last_modified = ""
        keys.ensure()
        self.refresh()

    def refresh(self) -> None:
        """Re-signs when the key file changed since the last signing (a stat a call)."""
        mtime = self._keys.mtime()
        if mtime == self._signed_at:
            return
        key = self._keys.current()
        jku = self._url + JWKS_PATH

        def variant(legacy: bool) -> CardVariant:
            card = build_card(self._backend, self._url, self._name, legacy=legacy)
            return CardVariant.of(card_json(sign(card, key, jku)))

        self.strict = variant(legacy=False)
        self.legacy = variant(legacy=True) if self._lists_0_3 else self.strict
        self.jwks = json.dumps(self._keys.jwks())
        self.last_modified = formatdate(usegmt=True)
        self._signed_at = mtime
