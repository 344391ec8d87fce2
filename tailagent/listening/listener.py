"""The socket the server listens on: loopback TCP or a unix socket, bound by
tailagent itself, and the names a request's Host may use to reach it."""

from __future__ import annotations

import contextlib
import os
import socket
from urllib.parse import urlsplit

from tailagent.config import Listen, Settings

# A listening socket's queue; the kernel caps it at net.core.somaxconn.
LISTEN_BACKLOG = 4096


def open_listener(listen: Listen) -> socket.socket:
    """Binds the listening socket ourselves, so the real port is known before serving
    and a unix socket is created owner-only, with no window where others can connect."""
    if listen.path is not None:
        listen.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileNotFoundError):
            if listen.path.is_socket():
                listen.path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            sock.bind(str(listen.path))
        finally:
            os.umask(old_umask)
    else:
        family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((listen.host, listen.port))
    sock.listen(LISTEN_BACKLOG)
    sock.set_inheritable(True)
    return sock


def listener_url(sock: socket.socket, listen: Listen) -> str:
    if listen.path is not None:
        return f"unix:{listen.path}"
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def served_hosts(settings: Settings) -> set[str]:
    """The names a request's Host may use; tailscaled adds the node's own at run time."""
    hosts = {"localhost", "127.0.0.1", "::1"}
    if not settings.listen.is_unix:
        hosts.add(settings.listen.host)
    for url in (settings.advertised_url, settings.own_url):
        if public_host := urlsplit(url).hostname:
            hosts.add(public_host)
    return hosts
