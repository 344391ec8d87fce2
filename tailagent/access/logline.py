"""Fields of the access log line, each one field as the request sent it.

The log formatter (tailagent/output/logs.py) keeps every record on one line with its
controls escaped; this keeps a field from passing for others of the same line: a
path keeps its percent-encoding (`%20`, `%0a`: no space, no newline, as sent), and a
JSON-RPC method or task id that is not a plain word is quoted, so `GetTask -> 200
allowed` sent as a method cannot read as the request's own outcome.
"""

from __future__ import annotations

import json
import re
from typing import Any

_PLAIN = re.compile(r"[\w.:/@+=?-]+")


def path_as_sent(scope: dict[str, Any]) -> str:
    """The request's path before percent-decoding (ASGI's raw_path), else its path."""
    raw = scope.get("raw_path")
    if isinstance(raw, bytes) and raw:
        return raw.decode("ascii", "backslashreplace")
    return str(scope["path"])


def word(value: object) -> str:
    """`value` as one field: itself when it is a plain word, else quoted (JSON)."""
    text = str(value)
    return text if _PLAIN.fullmatch(text) else json.dumps(text)
