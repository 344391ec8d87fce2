"""Signs the agent card in a process of its own.

Signing needs the private key and the libraries that use it (`cryptography`, and
PyJWT for push and hand-offs: ~9 MiB of a server's memory). A server signs its card at
start and after a key rotation, and nothing else at rest needs them, so the signing
runs here, in a short-lived child the server starts (`sign_cards`): the server holds neither the
libraries nor the private key (push deliveries, which sign each notification, load
them in the server when the first one is sent; so does the first hand-off to a peer,
which signs a hop of the actor chain for every request: delegation/outbound.py).

The child reads one JSON request on stdin, `{"state_dir", "jku", "payloads": [what
each card's signature covers, as text]}`, makes the first key if there is none, and
writes `{"signatures": [{"protected", "signature"} for each payload], "jwks": {...}}`
on stdout; on failure, one line on stderr. The payload is the card's canonical form
(publish.py's signed_form), made by the server, which has the card's protobuf type and
a2a-sdk loaded anyway: the child imports only `cryptography`'s signing and the key file,
not the card's message type, a2a-sdk's signing and what they pull in (protobuf, starlette,
asyncio), nor, run by child_entry.py, the package's own `__init__`: the child's CPU went
from ~0.30 s to ~0.19 s, and ~0.12 s signing without PyJWT (medians of 21 runs,
alternating).
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, utils

from tailagent.card.keys import KeyStore, SigningKey


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign(payload: str, key: SigningKey, jku: str) -> dict[str, str]:
    """A JWS over `payload` as a2a-sdk's card signer makes it (A2A 1.0, section 8.4):
    its protected header and signature, without the payload, which is the card itself.
    Made with `cryptography` as PyJWT makes it (the header's members sorted, without
    whitespace; ES256's signature the raw r and s of RFC 7518 section 3.4, EdDSA's
    Ed25519's own, RFC 8037): PyJWT's import, with x509 and an HTTP client for JWKS
    URLs, was ~70 ms of the child's CPU."""
    header = {"alg": key.alg, "jku": jku, "kid": key.kid, "typ": "JOSE"}
    protected = _b64(json.dumps(header, separators=(",", ":"), sort_keys=True).encode())
    signing_input = f"{protected}.{_b64(payload.encode())}".encode()
    if key.alg == "EdDSA" and isinstance(key.key, ed25519.Ed25519PrivateKey):
        signature = key.key.sign(signing_input)
    elif key.alg == "ES256" and isinstance(key.key, ec.EllipticCurvePrivateKey):
        if not isinstance(key.key.curve, ec.SECP256R1):
            raise ValueError(f"the signing key is on {key.key.curve.name}, not ES256's P-256")
        der = key.key.sign(signing_input, ec.ECDSA(hashes.SHA256()))
        r, s = utils.decode_dss_signature(der)
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    else:
        raise ValueError(f"the signing key is not an {key.alg} key")
    return {"protected": protected, "signature": _b64(signature)}


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
