"""A stand-in for tailscaled's LocalAPI, on a unix socket, for the tests.

It answers `whois` and `status` the way tailscaled shapes them (Node,
UserProfile, CapMap; `404 no match for IP:port` as text/plain; 503 when the
backend is down), from a JSON file the test rewrites whenever it likes:

    {"whois": {"100.64.0.2": {...}, "127.0.0.1:40000": {...}},
     "status": {...}, "down": false}

Run: python tests/fake_tailscaled.py SOCKET CONFIG
"""

from __future__ import annotations

import hashlib
import json
import os
import socketserver
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit


class Handler(BaseHTTPRequestHandler):
    config_path: Path

    def _reply(self, status: int, body: str, content_type: str) -> None:
        payload = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self) -> None:
        if self.headers.get("Host") != "local-tailscaled.sock":
            self._reply(403, "invalid Host header\n", "text/plain")
            return
        config = json.loads(self.config_path.read_text())
        if config.get("down"):
            self._reply(503, "no backend\n", "text/plain")
            return
        url = urlsplit(self.path)
        if url.path == "/localapi/v0/serve-config":
            body = json.dumps(config.get("serve", {}))
            payload = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Etag", f'"{hashlib.sha256(payload).hexdigest()[:16]}"')
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        elif url.path == "/localapi/v0/status":
            self._reply(200, json.dumps(config.get("status", {})), "application/json")
        elif url.path == "/localapi/v0/whois":
            addr = parse_qs(url.query).get("addr", [""])[0]
            peers = config.get("whois", {})
            found = peers.get(addr)
            if found is None:  # as tailscaled does: a peer is also known by its address
                found = next(
                    (p for p in peers.values() if f"{addr}/32" in p["Node"].get("Addresses", [])),
                    None,
                )
            if found is None:
                self._reply(404, f"no match for {addr}\n", "text/plain; charset=utf-8")
            else:
                self._reply(200, json.dumps(found), "application/json")
        else:
            self._reply(404, "not found\n", "text/plain")

    def do_POST(self) -> None:
        """serve-config writes: If-Match must name the current ETag; operator rights may
        be withheld by the test (`"operator": false`)."""
        config = json.loads(self.config_path.read_text())
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if urlsplit(self.path).path != "/localapi/v0/serve-config":
            self._reply(404, "not found\n", "text/plain")
            return
        if config.get("operator") is False:
            self._reply(403, "Access denied: serve config write access denied\n", "text/plain")
            return
        if config.pop("conflict_once", False):
            # Someone else wrote first: this write must fail, and the next one succeed.
            temp = self.config_path.with_suffix(".posted")
            temp.write_text(json.dumps(config))
            temp.replace(self.config_path)
            self._reply(412, "etag mismatch\n", "text/plain")
            return
        current = json.dumps(config.get("serve", {})).encode()
        etag = f'"{hashlib.sha256(current).hexdigest()[:16]}"'
        if self.headers.get("If-Match") not in (None, etag):
            self._reply(412, "etag mismatch\n", "text/plain")
            return
        config["serve"] = json.loads(body or b"{}")
        temp = self.config_path.with_suffix(".posted")
        temp.write_text(json.dumps(config))
        temp.replace(self.config_path)
        self._reply(200, "", "text/plain")

    def address_string(self) -> str:
        return "local"

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"fake-tailscaled: {format % args}\n")


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def main() -> None:
    socket_path, config_path = sys.argv[1], Path(sys.argv[2])
    Handler.config_path = config_path
    if os.path.exists(socket_path):
        os.unlink(socket_path)
    with Server(socket_path, Handler) as server:
        os.chmod(socket_path, 0o666)  # like tailscaled: anyone may ask, it checks who
        print("ready", flush=True)
        server.serve_forever()


if __name__ == "__main__":
    main()
