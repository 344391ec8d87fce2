"""The CLI's way onto the tailnet on a box whose only tailnet presence is a running
`serve --tsnet`: that server's node, through its loopback LocalAPI and SOCKS5 proxy.

The server leaves where they are, and their credentials, in its state dir (0600,
readable by the service's user only) while it runs; `peers`, `card` and `call` use
them only when the box has no tailscaled, and only for URLs beyond loopback.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from tailagent.access.localapi import LocalAPI, find_socket
from tailagent.config import cli_state_dir, is_loopback_url

CLIENT_FILE = "client.json"


@dataclass(frozen=True, slots=True)
class NodeAccess:
    localapi_address: str
    localapi_credential: str
    proxy: str  # socks5://tsnet:CREDENTIAL@127.0.0.1:PORT

    def localapi(self) -> LocalAPI:
        return LocalAPI.loopback(self.localapi_address, self.localapi_credential)


def client_file(state_dir: Path) -> Path:
    return state_dir / "tsnet" / CLIENT_FILE


def running_node(state_dir: Path | str | None = None) -> NodeAccess | None:
    """The node of a `serve --tsnet` running on this box with that state dir, if any."""
    try:
        data = json.loads(client_file(cli_state_dir(state_dir)).read_text())
        os.kill(int(data["pid"]), 0)  # a file left by a server that died says nothing
        address, credential = str(data["localapi"]), str(data["localapi_cred"])
        proxy = f"socks5://tsnet:{data['proxy_cred']}@{address}"
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return NodeAccess(address, credential, proxy)


def proxy_for(url: str, state_dir: Path | str | None = None) -> str | None:
    """The proxy a request from this box to `url` goes through: the running embedded
    node's when the box has no tailscaled of its own, else None (the host's network)."""
    if is_loopback_url(url) or find_socket(None).exists():
        return None
    node = running_node(state_dir)
    return node.proxy if node is not None else None
