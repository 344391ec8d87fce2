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
from urllib.parse import urlsplit

from a2a.types.a2a_pb2 import AgentCard
from google.protobuf.json_format import MessageToDict, ParseDict

from tailagent.agents.events import AgentBackend
from tailagent.card.builder import build_card, card_json
from tailagent.card.keyfile import key_version
from tailagent.process.origin import python_child

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
    """The signer child: `-m` alone would put the current directory first on its
    sys.path, and a `tailagent/` folder there (a clone, seen from its parent) would be
    imported in place of this package (process/origin.py's python_child says how it
    is not)."""
    if getattr(sys, "frozen", False):
        return [sys.executable, SIGNER_ARGUMENT]
    return python_child("tailagent.card.signer")


async def sign_cards(
    state_dir: Path, cards: list[dict[str, Any]], jku: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The cards signed with the state dir's key (made now if there is none), as
    served, and the JWKS that verifies them."""
    request = json.dumps({"state_dir": str(state_dir), "jku": jku, "cards": cards})
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
    return [card_json(ParseDict(card, AgentCard())) for card in reply["cards"]], reply["jwks"]


class CardPublisher:
    def __init__(
        self,
        backend: AgentBackend,
        url: str,
        name: str,
        state_dir: Path,
        lists_0_3: bool,
        own_url: str = "",
    ) -> None:
        """`own_url`: this box's own URL, when `url` is a name it shares with its
        siblings (a Tailscale Service): the card fetched by that host names it, so a
        sibling checking this box's hop (delegation/node_keys.py) finds the box's card
        at the box's own name, naming that name."""
        self._backend = backend
        self._url = url
        self._urls = list(dict.fromkeys([url, own_url or url]))
        self._name = name
        self._state_dir = state_dir
        self._lists_0_3 = lists_0_3
        self._signed_at = -1
        self._signing = asyncio.Lock()
        self.strict = self.legacy = CardVariant("", "")
        # Host -> (strict, legacy), for each URL after the first.
        self._by_host: dict[str, tuple[CardVariant, CardVariant]] = {}
        self.jwks = ""
        self.last_modified = ""

    @property
    def url(self) -> str:
        """The URL the card advertises (the server's public one)."""
        return self._url

    def variants(self, host: str | None) -> tuple[CardVariant, CardVariant]:
        """(strict, legacy) as fetched by `host`: the box's own card by its own name,
        the public one otherwise."""
        return self._by_host.get((host or "").lower(), (self.strict, self.legacy))

    async def refresh(self) -> None:
        """Re-signs when the key file changed since the last signing (a stat a call)."""
        if key_version(self._state_dir) == self._signed_at:
            return
        async with self._signing:
            version = key_version(self._state_dir)
            if version == self._signed_at:
                return
            variants = [False, True] if self._lists_0_3 else [False]
            by_url = {}
            for url in self._urls:
                cards = [
                    MessageToDict(build_card(self._backend, url, self._name, legacy=legacy))
                    for legacy in variants
                ]
                signed, jwks = await sign_cards(self._state_dir, cards, url + JWKS_PATH)
                by_url[url] = (CardVariant.of(signed[0]), CardVariant.of(signed[-1]))
            self.strict, self.legacy = by_url[self._url]
            self._by_host = {
                (urlsplit(url).hostname or ""): pair
                for url, pair in by_url.items()
                if url != self._url
            }
            self.jwks = json.dumps(jwks)
            self.last_modified = formatdate(usegmt=True)
            # A key made by the signer counts from its own file: read after it is there.
            self._signed_at = version or key_version(self._state_dir)
