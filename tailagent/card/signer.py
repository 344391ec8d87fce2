"""Signs the agent card in a process of its own.

Signing needs the private key and the libraries that use it (`cryptography` and
PyJWT, ~9 MiB of a server's memory). A server signs its card at start and after a
key rotation, and nothing else at rest needs them, so the signing runs here, in a
short-lived child the server starts (`sign_cards`): the server holds neither the
libraries nor the private key (push deliveries, which sign each notification, load
them in the server when the first one is sent; so does the first hand-off to a peer,
which signs a hop of the actor chain for every request: delegation/outbound.py).

The child reads one JSON request on stdin, `{"state_dir", "jku", "payloads": [what
each card's signature covers, as text]}`, makes the first key if there is none, and
writes `{"signatures": [{"protected", "signature"} for each payload], "jwks": {...}}`
on stdout; on failure, one line on stderr. The payload is the card's canonical form
(publish.py's signed_form), made by the server, which has the card's protobuf type and
a2a-sdk loaded anyway: the child imports only PyJWT's JWS and the key file, not the
card's message type, a2a-sdk's signing and what they pull in (protobuf, starlette,
asyncio), nor, run by child_entry.py, the package's own `__init__`: the child's CPU went
from ~0.30 s to ~0.19 s at every server start (medians of 21, alternating).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from jwt import api_jws

from tailagent.card.keys import KeyStore, SigningKey


def sign(payload: str, key: SigningKey, jku: str) -> dict[str, str]:
    """A JWS over `payload` as a2a-sdk's card signer makes it (A2A 1.0, section 8.4):
    its protected header and signature, without the payload, which is the card itself."""
    token = api_jws.encode(
        payload.encode(),
        key.key,  # type: ignore[arg-type]  # PyJWT takes cryptography keys as well
        algorithm=key.alg,
        headers={"alg": key.alg, "kid": key.kid, "typ": "JOSE", "jku": jku},
    )
    protected, _, signature = token.split(".")
    return {"protected": protected, "signature": signature}


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
    return {
        "signatures": [sign(payload, key, request["jku"]) for payload in request["payloads"]],
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
