"""The server's VAPID key (RFC 8292): the browser subscribes with its public half, and a
push service accepts a message for that subscription only when signed by the private half.

One key per state dir, made on first use and kept (0600): a new key would orphan every
subscription the browsers made with the old one, as they are bound to it.
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from py_vapid import Vapid
from py_vapid.utils import b64urlencode

from tailagent.statedir.files import write_private

KEY_FILE = "webpush-vapid.pem"


def load_vapid(state_dir: Path) -> Vapid:
    """The state dir's VAPID key, made now if it has none (or an unreadable one)."""
    path = state_dir / KEY_FILE
    try:
        return Vapid.from_pem(path.read_bytes())
    except (OSError, ValueError):
        key = Vapid()
        key.generate_keys()
        write_private(path, key.private_pem().decode())
        return key


def public_key(key: Vapid) -> str:
    """The public key as `PushManager.subscribe` takes it: an uncompressed P-256 point,
    base64url without padding."""
    point = key.public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return b64urlencode(point)
