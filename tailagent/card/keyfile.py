"""Where the card's signing keys live, known without loading `cryptography`.

The server only needs to notice that the key changed (a `keys rotate`) to have the
card signed again; the keys themselves (keys.py) are read by the signing process
(signer.py) and by push deliveries, not held by a server at rest.
"""

from __future__ import annotations

from pathlib import Path

KEYS_FILE = "signing-keys.json"


def key_version(state_dir: Path) -> int:
    """Changes whenever the key file is written; 0 while there is none."""
    try:
        return (state_dir / KEYS_FILE).stat().st_mtime_ns
    except FileNotFoundError:
        return 0
