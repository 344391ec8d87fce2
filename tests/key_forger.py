"""A forger of a node's keys: a local process on that node serving a key set and a card
of its own, noting every path asked of it (KeySetServer); and, run as a script, a
second local user doing it (tests/test_forged_node_keys.py runs it as `nobody`).

As a script it makes a key of its own, tries to read the node's tailagent's signing
keys, serves its key set on a loopback port of the node (which the node's tailscaled, in
userspace networking, serves to the tailnet at that port, as any local port), and sends
B a chain signed with its key through the node's tailscaled proxy, as any local process
may. One JSON line out per step: `{"steal": ...}`, `{"port": N}`; then, at a line on
stdin, the hop sent: `{"status": N, "body": ...}`; at stdin's end, `{"asked": [...]}`.

Run: python3 tests/key_forger.py NODE AUDIENCE PROXY TARGET PERSON STEAL
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

JWKS = "/.well-known/jwks.json"
CARD = "/.well-known/agent-card.json"


class KeySetServer(ThreadingHTTPServer):
    """A local process on a node serving a key set `jwk` and a card naming `url`, on a
    loopback port, and noting every path asked of it."""

    def __init__(self, jwk: dict[str, Any], url: str) -> None:
        super().__init__(("127.0.0.1", 0), _KeySetHandler)
        self.asked: list[str] = []
        self.bodies = {
            JWKS: {"keys": [jwk]},
            CARD: {"name": "mallory", "supportedInterfaces": [{"url": url}]},
        }
        threading.Thread(target=self.serve_forever, daemon=True).start()


class _KeySetHandler(BaseHTTPRequestHandler):
    server: KeySetServer

    def do_GET(self) -> None:
        self.server.asked.append(self.path)
        body = json.dumps(self.server.bodies.get(self.path, {})).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


def _say(**line: Any) -> None:
    print(json.dumps(line), flush=True)


def _send(url: str, proxy: str, chain: list[str]) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy}))
    message = {"messageId": "forged", "role": "ROLE_USER", "parts": [{"text": "as them"}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    headers = {"A2A-Version": "1.0", "A2A-Actor-Chain": ",".join(chain),
               "Content-Type": "application/json"}  # fmt: skip
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    try:
        with opener.open(request, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def main(node: str, audience: str, proxy: str, target: str, person: str, steal: str) -> None:
    from tailagent.card.keys import KeyStore
    from tailagent.delegation.chain import extend

    try:
        _say(steal="ok: " + Path(steal).read_text()[:40])
    except OSError as exc:
        _say(steal=f"refused: {type(exc).__name__} {exc}")
    own = Path(tempfile.mkdtemp(prefix="forger-"))
    try:
        key = KeyStore(own).init()
        server = KeySetServer(key.jwk, f"http://{node}")
        port = server.server_address[1]
        _say(port=port)
        sys.stdin.readline()
        chain = extend([], key, f"http://{node}:{port}{JWKS}", person=person, device="laptop",
                       node=node, audience=audience, task_id="t", context_id="c")  # fmt: skip
        status, body = _send(target, proxy, chain)
        _say(status=status, body=body)
        sys.stdin.read()
        _say(asked=server.asked)
        server.shutdown()
    finally:
        shutil.rmtree(own, ignore_errors=True)


if __name__ == "__main__":
    main(*sys.argv[1:7])
