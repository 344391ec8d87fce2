"""Form tokens: proof that a POST came from a page this server rendered for this caller.

The origin checks (web/browser_rules.py) stop other sites; the token stops a replay. It
is an HMAC over the caller, the action and the task, with the time it was made, so
a token copied from one person's page is worthless to another person, on another
task, or for another action, and old pages stop working after a day.
"""

from __future__ import annotations

import hashlib
import hmac
import time

TOKEN_SECONDS = 24 * 3600


def _mac(secret: bytes, owner: str, action: str, task_id: str, made: int) -> str:
    message = f"{owner}\n{action}\n{task_id}\n{made}".encode()
    return hmac.new(secret, b"form:" + message, hashlib.sha256).hexdigest()


def make(secret: bytes, owner: str, action: str, task_id: str = "") -> str:
    made = int(time.time())
    return f"{made}.{_mac(secret, owner, action, task_id, made)}"


def valid(secret: bytes, token: str, owner: str, action: str, task_id: str = "") -> bool:
    made, _, mac = token.partition(".")
    if not made.isdigit() or time.time() - int(made) > TOKEN_SECONDS:
        return False
    return hmac.compare_digest(mac, _mac(secret, owner, action, task_id, int(made)))
