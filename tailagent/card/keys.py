"""The card's signing keys: made on first start, rotated on demand, kept 0600.

The `kid` of a key is its RFC 7638 thumbprint, so anyone holding the public key
can check which key it is. After a rotation the old public key stays in the
JWKS for a grace period: cards a peer fetched just before still verify.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from tailagent.card.keyfile import KEYS_FILE
from tailagent.statedir.files import write_private

__all__ = ["KEYS_FILE", "KeyStore", "SigningKey", "public_jwk", "thumbprint"]
ALGORITHMS = ("ES256", "EdDSA")
GRACE = timedelta(days=7)

PrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def public_jwk(key: PrivateKey) -> dict[str, str]:
    """The public half as a JWK, with only the members RFC 7638 hashes."""
    if isinstance(key, ed25519.Ed25519PrivateKey):
        raw = key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return {"crv": "Ed25519", "kty": "OKP", "x": _b64(raw)}
    numbers = key.public_key().public_numbers()
    return {
        "crv": "P-256",
        "kty": "EC",
        "x": _b64(numbers.x.to_bytes(32, "big")),
        "y": _b64(numbers.y.to_bytes(32, "big")),
    }


def thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638: SHA-256 over the required members, sorted, without whitespace."""
    required = {"EC": ("crv", "kty", "x", "y"), "OKP": ("crv", "kty", "x")}[jwk["kty"]]
    canonical = json.dumps({k: jwk[k] for k in required}, separators=(",", ":"), sort_keys=True)
    return _b64(hashlib.sha256(canonical.encode()).digest())


def _new_key(alg: str) -> PrivateKey:
    if alg == "EdDSA":
        return ed25519.Ed25519PrivateKey.generate()
    return ec.generate_private_key(ec.SECP256R1())


@dataclass(frozen=True)
class SigningKey:
    kid: str
    alg: str
    key: PrivateKey

    @property
    def jwk(self) -> dict[str, str]:
        return {**public_jwk(self.key), "kid": self.kid, "alg": self.alg, "use": "sig"}


class KeyStore:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / KEYS_FILE

    def _read(self) -> dict[str, Any]:
        return json.loads(self.path.read_text()) if self.path.exists() else {}

    def exists(self) -> bool:
        return self.path.exists()

    def init(self, alg: str = "ES256") -> SigningKey:
        """Makes the first key; refuses if one exists (rotate replaces it)."""
        if self.exists():
            raise FileExistsError(f"a signing key already exists in {self.path}")
        return self._write_new(alg, retired=[])

    def rotate(self, alg: str | None = None) -> SigningKey:
        data = self._read()
        if not data:
            return self.init(alg or "ES256")
        old = self.current()
        now = datetime.now(UTC)
        retired = [r for r in data.get("retired", []) if datetime.fromisoformat(r["until"]) > now]
        retired.append({"jwk": old.jwk, "until": (now + GRACE).isoformat(timespec="seconds")})
        return self._write_new(alg or old.alg, retired)

    def _write_new(self, alg: str, retired: list[dict[str, Any]]) -> SigningKey:
        key = _new_key(alg)
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode()
        kid = thumbprint(public_jwk(key))
        data = {"current": {"kid": kid, "alg": alg, "pem": pem}, "retired": retired}
        write_private(self.path, json.dumps(data, indent=2) + "\n")
        return SigningKey(kid, alg, key)

    def current(self) -> SigningKey:
        current = self._read()["current"]
        key = serialization.load_pem_private_key(current["pem"].encode(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey)
        return SigningKey(current["kid"], current["alg"], key)

    def ensure(self) -> SigningKey:
        """The current key, made on first start when there is none."""
        return self.current() if self.exists() else self.init()

    def jwks(self) -> dict[str, Any]:
        """The current public key and the retired ones still in their grace period."""
        now = datetime.now(UTC)
        retired = [
            r["jwk"]
            for r in self._read().get("retired", [])
            if datetime.fromisoformat(r["until"]) > now
        ]
        return {"keys": [self.current().jwk, *retired]}
