"""How the CLI reaches an agent: the URL (http(s):// or this box's unix:/path), the
token it sends, the way there (the running embedded node's proxy, if this box has
no tailscaled) and an a2a-sdk client on top. Shared by call, tasks, watch, cancel.
"""

from __future__ import annotations

import contextlib
import os
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, create_client

from tailagent.access.tokens import read_local_token
from tailagent.config import DEFAULT_URL, cli_state_dir, default_state_dir, is_loopback_url
from tailagent.statedir.lock import running_server

UNIX_BASE = "http://localhost"  # the Host a server on a unix socket answers to


SERVICE_STATE_DIRS = Path("/var/lib")  # systemd's StateDirectory=tailagent[-NAME]


@dataclass(frozen=True)
class Target:
    url: str  # as the user named it
    socket: Path | None  # a unix socket on this box
    state_dir: str | None  # --state-dir, as given
    found_url: str  # what a command without --url reaches
    # The state dir of the server at `url` on this box, whose local token it accepts
    # (None: no server found there, or not on this box).
    credentials: Path | None = None

    @property
    def base(self) -> str:
        return UNIX_BASE if self.socket is not None else self.url.rstrip("/")

    @property
    def local(self) -> bool:
        """On this box: a unix socket, or a loopback address."""
        return self.socket is not None or is_loopback_url(self.url)

    def reply_options(self) -> list[str]:
        """The options a follow-up command needs to reach the same agent as this one:
        none for the agent `call` finds by itself."""
        needed = ["--state-dir", self.state_dir] if self.state_dir else []
        if self.found_url != self.url:
            needed += ["--url", self.url]
        return needed

    def token(self, given: str | None) -> str | None:
        """The token to send: the one given, else the local token of the server found
        at the URL on this box (never another server's, and never off the box)."""
        if given:
            return given
        return read_local_token(self.credentials) if self.credentials and self.local else None

    def missing_credentials(self) -> str | None:
        """Why no token went with a call to a server on this box, for its refusal."""
        if not self.local or self.credentials is not None:
            return None
        return (
            f"no tailagent server on this box that this user can read listens at {self.url} "
            "(its state dir holds the local token): pass its --state-dir, or a --token "
            "made there with `tailagent token add NAME`"
        )


def parse_target(url: str | None, state_dir: str | None) -> Target:
    """The agent to talk to; without --url, the server running on this box's state dir
    (wherever it listens, a unix socket included), else the default port. A state dir
    named on purpose (--state-dir, $TAILAGENT_STATE_DIR) must have a server running."""
    chosen = cli_state_dir(state_dir)
    running = running_server(chosen) or {}
    listener = running.get("listener", "")
    found = listener if listener.startswith(("http://", "unix:")) else DEFAULT_URL
    if url is None and not running and (state_dir or os.environ.get("TAILAGENT_STATE_DIR")):
        others = [f"{u} (state dir {d})" for d, u in _servers() if d != chosen]
        where = f"; running here: {', '.join(others)}" if others else ""
        raise ValueError(
            f"no tailagent server runs on the state dir {chosen}{where}. Start one with "
            f"`tailagent serve --state-dir {chosen}`, or name the server with --url"
        )
    url = found if url is None else url
    credentials = next((d for d, u in _servers(chosen) if _same_server(u, url)), None)
    if url.startswith("unix:"):
        path = Path(url.removeprefix("unix:"))
        if not path.is_absolute():
            raise ValueError(
                f"--url: a unix socket URL wants an absolute path: unix:/run/…, not {url}"
            )
        return Target(url, path, state_dir, found, credentials)
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"--url: {url!r} is not an http(s):// URL or unix:/path")
    return Target(url, None, state_dir, found, credentials)


def _servers(first: Path | None = None) -> list[tuple[Path, str]]:
    """The servers running on this box that this user can see, as (state dir, listener):
    `first`, the user's own state dir, then the system services'."""
    dirs = [first, cli_state_dir(), default_state_dir()]
    with contextlib.suppress(OSError):
        dirs += sorted(SERVICE_STATE_DIRS.glob("tailagent*"))
    servers: list[tuple[Path, str]] = []
    for directory in dict.fromkeys(d for d in dirs if d is not None):
        running = running_server(directory)
        listener = (running or {}).get("listener", "")
        if listener.startswith(("http://", "unix:")):
            servers.append((directory, listener))
    return servers


def _same_server(listener: str, url: str) -> bool:
    """Whether `url` reaches the server listening at `listener` (any loopback name)."""
    if listener.startswith("unix:") or url.startswith("unix:"):
        return listener == url
    ours, theirs = urlsplit(listener), urlsplit(url.rstrip("/"))
    return (
        theirs.scheme == "http"
        and theirs.port == ours.port
        and is_loopback_url(url)
        and theirs.path in ("", "/")
    )


def open_http(target: Target, token: str | None) -> httpx.AsyncClient:
    """`token` as given (--token); the local token is used where it may be."""
    headers = {"A2A-Version": "1.0"}
    if chosen := target.token(token):
        headers["Authorization"] = f"Bearer {chosen}"
    timeout = httpx.Timeout(10.0, read=None)
    if target.socket is not None:
        transport = httpx.AsyncHTTPTransport(uds=str(target.socket), verify=_tls(target))
        return httpx.AsyncClient(headers=headers, timeout=timeout, transport=transport)
    return httpx.AsyncClient(
        headers=headers, timeout=timeout, proxy=_proxy(target), verify=_tls(target)
    )


def _tls(target: Target) -> ssl.SSLContext | bool:
    """How the client checks certificates. httpx's default, certifi's CAs, for a URL
    that may speak TLS. A server on this box over plain http (or its unix socket) never
    does: a2a_client points its card's URLs back at that listener. There, a context
    that trusts no CA, so refuses any certificate, spares loading certifi's bundle:
    ~30-50 ms of CPU in every local `call`, `tasks`, `watch`."""
    if target.local and urlsplit(target.base).scheme == "http":
        return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    return True


def _proxy(target: Target) -> str | None:
    """The embedded node's proxy for a URL beyond this box; none for one on it."""
    if target.local:
        return None
    # Here, not at the top: its LocalAPI client brings prometheus_client, ~20 ms of CPU
    # that every local `call`, `tasks`, `watch` would pay for nothing.
    from tailagent.tailnet.tsnet.client import proxy_for

    return proxy_for(target.url, target.state_dir)


@asynccontextmanager
async def a2a_client(target: Target, http: httpx.AsyncClient) -> AsyncIterator[Client]:
    """An a2a-sdk client for the target. On this box (a unix socket, a loopback
    address) the card's URLs, the public tailnet ones, are pointed back at the listener
    named: a local call stays local, with the local token, even while the tailnet is
    down or the public name resolves nowhere yet."""
    config = ClientConfig(httpx_client=http)
    if not target.local:
        client = await create_client(target.base, client_config=config)
    else:
        card = await A2ACardResolver(http, target.base).get_agent_card()
        here = urlsplit(target.base)
        for interface in card.supported_interfaces:
            path = urlsplit(interface.url).path.rstrip("/")
            interface.url = f"{here.scheme}://{here.netloc}{path}"
        client = await create_client(card, client_config=config)
    try:
        yield client
    finally:
        await client.close()
