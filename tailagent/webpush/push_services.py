"""Which push services a subscription's endpoint may name.

An endpoint is a URL the browser hands over, so a page (or anyone who may subscribe)
could name any host: the tailnet's, the box's own ports. The server POSTs only to the
push services of the browsers (`desk.push_services`), over https, and to an `http://`
origin on this box only when the settings name that very origin.
"""

from __future__ import annotations

from urllib.parse import urlsplit


class PushServices:
    def __init__(self, allowed: tuple[str, ...]) -> None:
        self._hosts = tuple(entry.lower() for entry in allowed if "://" not in entry)
        self._origins = frozenset(entry.lower().rstrip("/") for entry in allowed if "://" in entry)

    def refusal(self, endpoint: str) -> str | None:
        """Why the server will not push to `endpoint` (None: it will)."""
        try:
            parts = urlsplit(endpoint)
            host, port = (parts.hostname or ""), parts.port
        except ValueError:
            return "the endpoint is not a URL"
        if parts.username or parts.password:
            return "the endpoint carries credentials"
        origin = f"{parts.scheme}://{parts.netloc}".lower()
        if origin in self._origins:
            return None
        if parts.scheme == "https" and port in (None, 443) and self._host_allowed(host):
            return None
        return (
            f"{host or endpoint!r} is not a push service this server sends to (desk.push_services)"
        )

    def _host_allowed(self, host: str) -> bool:
        for pattern in self._hosts:
            if pattern.startswith("*."):
                if host.endswith(pattern[1:]) and len(host) > len(pattern) - 1:
                    return True
            elif host == pattern:
                return True
        return False
