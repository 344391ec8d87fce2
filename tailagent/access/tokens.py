"""Bearer tokens: named, with roles, stored only as hashes, revocable.

The file (`tokens.json` in the state dir, 0600) is re-read when it changes (it is
replaced whole, so a change is a new inode even within one tick of the clock), so
`tailagent token revoke` takes effect on a running server at its next request.
A `local` token is made on first start and kept in `local-token` (0600): it is
how `tailagent call`, run by the same user on the same box, gets in without a
tailnet identity.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tailagent.statedir.files import write_private

TOKENS_FILE = "tokens.json"
LOCAL_TOKEN_FILE = "local-token"
LOCAL_TOKEN_NAME = "local"
TOKEN_PREFIX = "ta_"


@dataclass(frozen=True, slots=True)
class TokenInfo:
    name: str
    roles: tuple[str, ...]
    created: str


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / TOKENS_FILE
        self.local_path = state_dir / LOCAL_TOKEN_FILE
        # The file's (inode, mtime, size) when it was read, and what it held.
        self._loaded_at: tuple[int, int, int] | None = None
        self._entries: dict[str, dict[str, object]] = {}
        # The tokens that verified against what the file holds now, by their text: a
        # caller's every request after its first costs a lookup, not a hash and a pass
        # over every stored hash. Emptied whenever the file changes.
        self._verified: dict[str, TokenInfo] = {}

    def _load(self) -> dict[str, dict[str, object]]:
        try:
            seen = os.stat(self.path)
        except FileNotFoundError:
            self._entries, self._loaded_at, self._verified = {}, None, {}
            return self._entries
        version = (seen.st_ino, seen.st_mtime_ns, seen.st_size)
        if version != self._loaded_at:
            self._entries = json.loads(self.path.read_text() or "{}")
            self._loaded_at = version
            self._verified = {}
        return self._entries

    def _save(self, entries: dict[str, dict[str, object]]) -> None:
        write_private(self.path, json.dumps(entries, indent=2, sort_keys=True) + "\n")

    def add(self, name: str, roles: tuple[str, ...]) -> str:
        """Creates a token and returns it: the only time it is ever seen."""
        entries = dict(self._load())
        if name in entries:
            raise ValueError(f"a token named {name!r} exists; revoke it first")
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        entries[name] = {
            "hash": _hash(token),
            "roles": list(roles),
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        self._save(entries)
        return token

    def revoke(self, name: str) -> None:
        entries = dict(self._load())
        if name not in entries:
            raise KeyError(f"no token named {name!r}")
        del entries[name]
        self._save(entries)
        if name == LOCAL_TOKEN_NAME:
            self.local_path.unlink(missing_ok=True)

    def list(self) -> list[TokenInfo]:
        return [
            TokenInfo(name, tuple(entry["roles"]), str(entry["created"]))  # type: ignore[arg-type]
            for name, entry in sorted(self._load().items())
        ]

    def verify(self, token: str) -> TokenInfo | None:
        """The token's entry: one that verified since the file last changed, else its
        hash compared in constant time against every stored hash. Only tokens that
        verify are remembered, so there are never more than the file holds."""
        entries = self._load()
        if (known := self._verified.get(token)) is not None:
            return known
        presented = _hash(token)
        found: TokenInfo | None = None
        for name, entry in entries.items():
            if hmac.compare_digest(presented, str(entry["hash"])):
                found = TokenInfo(name, tuple(entry["roles"]), str(entry["created"]))  # type: ignore[arg-type]
        if found is not None:
            self._verified[token] = found
        return found

    def ensure_local(self) -> None:
        """Makes the `local` token on first start (and again if its file was lost)."""
        if self.local_path.exists() and LOCAL_TOKEN_NAME in self._load():
            return
        if LOCAL_TOKEN_NAME in self._load():
            self.revoke(LOCAL_TOKEN_NAME)
        token = self.add(LOCAL_TOKEN_NAME, ("caller", "approver", "admin"))
        write_private(self.local_path, token + "\n")


def read_local_token(state_dir: Path) -> str | None:
    try:
        return (state_dir / LOCAL_TOKEN_FILE).read_text().strip() or None
    except OSError:
        return None
