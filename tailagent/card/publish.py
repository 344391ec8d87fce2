"""The signed card in its two variants, and the JWKS that verifies it.

Both variants are signed (A2A 1.0, section 8.4: a JWS over the RFC 8785 form of
the card without `signatures`, through a2a-sdk's signer), once, and again only
when the key changes: `tailagent keys rotate` takes effect without a restart. The
signing itself runs in a child process (signer.py), which keeps the private key and
the signing libraries out of the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import sys
from email.utils import formatdate
from pathlib import Path
from typing import Any, NamedTuple

from a2a.types.a2a_pb2 import AgentCard
from a2a.utils._jcs import canonicalize
from google.protobuf.json_format import MessageToDict, ParseDict

from tailagent.agents.events import AgentBackend
from tailagent.card.builder import build_card, card_json
from tailagent.card.keyfile import key_version
from tailagent.process.origin import path_flags

JWKS_PATH = "/.well-known/jwks.json"
# The one-file binary has no `-m`: its entry point takes this argument instead.
SIGNER_ARGUMENT = "--sign-card"


class CardSigningFailed(Exception):
    """The card could not be signed; str() is the one line that says why."""


class CardVariant(NamedTuple):
    """One serialised card and its validator."""

    body: str
    etag: str

    @classmethod
    def of(cls, card: dict[str, Any]) -> CardVariant:
        body = json.dumps(card, ensure_ascii=False)
        return cls(body, '"' + hashlib.sha256(body.encode()).hexdigest()[:32] + '"')


def signer_command() -> list[str]:
    """The signer child: child_entry.py of this very package, run by its path, not
    with `-m` (which runs the package's `__init__` first: the child's largest cost);
    with the flags that keep the current directory off its sys.path, where a
    `tailagent/` folder (a clone, seen from its parent) could be imported in place of
    this package (process/origin.py's path_flags)."""
    if getattr(sys, "frozen", False):
        return [sys.executable, SIGNER_ARGUMENT]
    return [sys.executable, *path_flags(), str(Path(__file__).with_name("child_entry.py"))]


def _without_empty(value: Any) -> Any:
    """`value` without its empty strings, lists and objects, at every depth (None when
    nothing is left), as a2a-sdk's signing drops them (its `_clean_empty`)."""
    if isinstance(value, dict):
        kept = {k: c for k, v in value.items() if (c := _without_empty(v)) is not None}
        return kept or None
    if isinstance(value, list):
        return [c for v in value if (c := _without_empty(v)) is not None] or None
    if isinstance(value, str) and not value:
        return None
    return value


def signed_form(card: dict[str, Any]) -> str:
    """What a card's signature covers, as a2a-sdk's signer and verifiers make it: the
    card (as protobuf JSON) without `signatures` and without empty values, in RFC 8785
    form. Made here, where a2a-sdk is loaded anyway, and not in the signer child, which
    thus needs neither protobuf nor a2a-sdk (signer.py)."""
    return canonicalize(_without_empty({k: v for k, v in card.items() if k != "signatures"}))


async def sign_cards(
    state_dir: Path, cards: list[dict[str, Any]], jku: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The cards (as protobuf JSON) signed with the state dir's key (made now if there
    is none), as served, and the JWKS that verifies them."""
    payloads = [signed_form(card) for card in cards]
    request = json.dumps({"state_dir": str(state_dir), "jku": jku, "payloads": payloads})
    child = await asyncio.create_subprocess_exec(
        *signer_command(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await child.communicate(request.encode())
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        await child.wait()
        raise
    if child.returncode != 0:
        lines = err.decode(errors="replace").strip().splitlines() or [f"exit {child.returncode}"]
        raise CardSigningFailed(f"cannot sign the agent card: {lines[-1]}")
    reply = json.loads(out)
    signed = [
        {**card, "signatures": [*card.get("signatures", []), signature]}
        for card, signature in zip(cards, reply["signatures"], strict=True)
    ]
    return [card_json(ParseDict(card, AgentCard())) for card in signed], reply["jwks"]


class CardPublisher:
    def __init__(
        self, backend: AgentBackend, url: str, name: str, state_dir: Path, lists_0_3: bool
    ) -> None:
        self._backend = backend
        self._url = url
        self._name = name
        self._state_dir = state_dir
        self._lists_0_3 = lists_0_3
        self._signed_at = -1
        self._signing = asyncio.Lock()
        self.strict = self.legacy = CardVariant("", "")
        self.jwks = ""
        self.last_modified = ""

    @property
    def url(self) -> str:
        """The URL the card advertises (the server's public one)."""
        return self._url

    async def refresh(self) -> None:
        """Re-signs when the key file changed since the last signing (a stat a call)."""
        if key_version(self._state_dir) == self._signed_at:
            return
        async with self._signing:
            version = key_version(self._state_dir)
            if version == self._signed_at:
                return
            variants = [False, True] if self._lists_0_3 else [False]
            cards = [
                MessageToDict(build_card(self._backend, self._url, self._name, legacy=legacy))
                for legacy in variants
            ]
            signed, jwks = await sign_cards(self._state_dir, cards, self._url + JWKS_PATH)
            self.strict = CardVariant.of(signed[0])
            self.legacy = CardVariant.of(signed[-1])
            self.jwks = json.dumps(jwks)
            self.last_modified = formatdate(usegmt=True)
            # A key made by the signer counts from its own file: read after it is there.
            self._signed_at = version or key_version(self._state_dir)
