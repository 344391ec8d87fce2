"""The CLI's way onto the tailnet on a box whose only tailnet presence is a running
`serve --tsnet`: that server's node, through its loopback LocalAPI and SOCKS5 proxy.

The server leaves where they are, and their credentials, in its state dir (0600,
readable by the service's user only) while it runs; `peers`, `card` and `call` use
them only when the box has no tailscaled, and only for URLs beyond loopback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tailagent.config import cli_state_dir, is_loopback_url
from tailagent.statedir.lock import running_server
from tailagent.tailnet.localapi import LocalAPI, find_socket

CLIENT_FILE = "client.json"


@dataclass(frozen=True, slots=True)
class NodeAccess:
    localapi_address: str
    localapi_credential: str
    proxy: str  # socks5://tsnet:CREDENTIAL@127.0.0.1:PORT

    @classmethod
    def of(cls, record: dict[str, Any]) -> NodeAccess:
        """From the node's status, or the record written from it (same keys)."""
        address = str(record["localapi"])
        proxy = f"socks5://tsnet:{record['proxy_cred']}@{address}"
        return cls(address, str(record["localapi_cred"]), proxy)

    def localapi(self) -> LocalAPI:
        return LocalAPI.loopback(self.localapi_address, self.localapi_credential)


def node_dir(state_dir: Path) -> Path:
    return state_dir / "tsnet"


def client_file(state_dir: Path) -> Path:
    return node_dir(state_dir) / CLIENT_FILE


def running_node(state_dir: Path | str | None = None) -> NodeAccess | None:
    """The node of a `serve --tsnet` running on this box with that state dir, if any."""
    directory = cli_state_dir(state_dir)
    if running_server(directory) is None:  # a file left by a server that died says nothing
        return None
    try:
        return NodeAccess.of(json.loads(client_file(directory).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def node_without_tailscaled(
    state_dir: Path | str | None = None, socket: Path | None = None
) -> NodeAccess | None:
    """The running embedded node, when this box has no tailscaled of its own (at
    `socket`, or where tailscaled usually is)."""
    if find_socket(socket).exists():
        return None
    return running_node(state_dir)


def proxy_for(url: str, state_dir: Path | str | None = None) -> str | None:
    """The proxy a request from this box to `url` goes through: the running embedded
    node's when the box has no tailscaled of its own, else None (the host's network)."""
    if is_loopback_url(url):
        return None
    node = node_without_tailscaled(state_dir)
    return node.proxy if node is not None else None
