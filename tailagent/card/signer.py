"""Signs the agent card in a process of its own.

Signing needs the private key and the libraries that use it (`cryptography` and
PyJWT, ~9 MiB of a server's memory). A server signs its card at start and after a
key rotation, and nothing else at rest needs them, so the signing runs here, in a
short-lived child the server starts (`sign_cards`): the server holds neither the
libraries nor the private key (push deliveries, which sign each notification, load
them in the server when the first one is sent; so does the first hand-off to a peer,
which signs a hop of the actor chain for every request: delegation/outbound.py).

The child reads one JSON request on stdin, `{"state_dir", "jku", "cards": [card as
protobuf JSON]}`, makes the first key if there is none, and writes `{"cards": [the
signed cards, as protobuf JSON], "jwks": {...}}` on stdout; on failure, one line on
stderr. It imports only the card's message type, the signing and the key file: the
served form (with A2A 0.3's fields beside 1.0's) is the server's to make, as the
a2a-sdk server modules that make it cost a child started at every server start
~0.4 s of CPU (docs/measured.md).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from a2a.types.a2a_pb2 import AgentCard
from a2a.utils.signing import create_agent_card_signer
from google.protobuf.json_format import MessageToDict, ParseDict

from tailagent.card.keys import KeyStore, SigningKey


def sign(card: AgentCard, key: SigningKey, jku: str) -> AgentCard:
    signer = create_agent_card_signer(
        key.key,  # type: ignore[arg-type]  # PyJWT takes cryptography keys as well
        {"alg": key.alg, "kid": key.kid, "typ": "JOSE", "jku": jku},
    )
    return signer(card)


def answer(request: dict[str, Any]) -> dict[str, Any]:
    keys = KeyStore(Path(request["state_dir"]))
    try:
        key = keys.ensure()
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{keys.path} is not a signing key file ({type(exc).__name__}: {exc}); restore "
            "it, or remove it to have a new key made (clients that pinned the old one "
            "must pin again)"
        ) from None
    cards = [ParseDict(card, AgentCard()) for card in request["cards"]]
    return {
        "cards": [MessageToDict(sign(card, key, request["jku"])) for card in cards],
        "jwks": keys.jwks(),
    }


def main() -> None:
    try:
        reply = answer(json.load(sys.stdin))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        raise SystemExit(1) from None
    except (OSError, KeyError) as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    json.dump(reply, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
