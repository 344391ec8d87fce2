"""A forwarding HTTP proxy that plays the tailnet for servers on loopback.

tailscaled's `--outbound-http-proxy-listen` lets a process reach tailnet names
(`http://devbox-2.tail.test/...`) through a plain HTTP proxy. This one does the same for
tests: a request for a host in `routes` goes to that server's loopback port, anything
else gets 502, as does a host whose server is down. A host in `forwarded_for` is
reached as through its `tailscale serve`: with X-Forwarded-For naming the caller's
tailnet address (the server believes it from root's socket, and asks whois). Each
request gets a connection of its own (`Connection: close`), and the answer is passed on
as it comes, so a server's event stream reaches the client live and breaks when the
server dies.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from urllib.parse import urlsplit

MAX_HEAD = 64 * 1024


class _Handler(socketserver.BaseRequestHandler):
    server: TailnetProxy

    def handle(self) -> None:
        client: socket.socket = self.request
        head = b""
        while b"\r\n\r\n" not in head and len(head) < MAX_HEAD:
            chunk = client.recv(4096)
            if not chunk:
                return
            head += chunk
        head, _, rest = head.partition(b"\r\n\r\n")
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, target, version = request_line.split(" ", 2)
        url = urlsplit(target)
        host = (url.hostname or "").lower()
        # A port of its own on a node (another process there) before the node's tailagent.
        port = self.server.routes.get(f"{host}:{url.port}") or self.server.routes.get(host)
        if port is None:
            self._bad_gateway(client, f"no route to {url.hostname}")
            return
        hop_headers = ("connection:", "proxy-", "x-forwarded-for:")
        headers = [h for h in header_lines if not h.lower().startswith(hop_headers)]
        caller = self.server.forwarded_for.get((url.hostname or "").lower())
        if caller is not None:
            headers.append(f"X-Forwarded-For: {caller}")
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        forwarded = "\r\n".join([f"{method} {path} {version}", *headers, "Connection: close"])
        try:
            upstream = socket.create_connection(("127.0.0.1", port), timeout=5)
        except OSError as exc:
            self._bad_gateway(client, f"{url.hostname} is down: {exc}")
            return
        with upstream:
            upstream.settimeout(None)
            upstream.sendall(forwarded.encode("latin-1") + b"\r\n\r\n" + rest)
            pump = threading.Thread(target=_copy, args=(client, upstream), daemon=True)
            pump.start()
            _copy(upstream, client)
        client.close()

    def _bad_gateway(self, client: socket.socket, why: str) -> None:
        body = why.encode()
        client.sendall(
            b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )


def _copy(source: socket.socket, target: socket.socket) -> None:
    """Bytes from `source` to `target` until either end closes."""
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class TailnetProxy(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        # MagicDNS name -> the loopback port of the server that node runs; "name:port"
        # -> the loopback port of another process serving on that port of the node.
        self.routes: dict[str, int] = {}
        # MagicDNS name -> the tailnet address its serve says each caller comes from.
        self.forwarded_for: dict[str, str] = {}
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> TailnetProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
