"""`serve --tsnet`: this server as a tailnet node of its own.

The node (tsnet, in this process) listens on the tailnet and hands each
connection to the server's loopback listener, registering that connection's
loopback ip:port so the node's LocalAPI whois names the peer; the access layer
asks that LocalAPI exactly as it asks tailscaled. No X-Forwarded-For is ever
believed: there is no tailscaled on the box to send one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tailagent.config import Settings, TsnetSettings
from tailagent.output.metrics import TSNET_CONNECTIONS, TSNET_KEY_EXPIRY, TSNET_NODE
from tailagent.statedir.files import write_private
from tailagent.tailnet.localapi import LocalAPI
from tailagent.tailnet.presence import PresenceError
from tailagent.tailnet.serve_entry import say_unapproved
from tailagent.tailnet.tsnet.auth_key import auth_key
from tailagent.tailnet.tsnet.client import NodeAccess, client_file, node_dir
from tailagent.tailnet.tsnet.library import LibraryMissing, NodeLibrary

log = logging.getLogger("tailagent.tailnet.tsnet")

START_TIMEOUT = 60.0
POLL_SECONDS = 0.1
WATCH_SECONDS = 5.0
KEYS_PAGE = "https://login.tailscale.com/admin/settings/keys"


PORT_FILE = "udp-port"


def kept_port(directory: Path) -> int:
    """The UDP port the node's WireGuard listens on, the same at every start. A peer that
    talked to the node before a restart goes on sending to the address it had checked
    (magicsock trusts a checked path for 6.5 s): on the same port its packets reach the
    new process; on a new one they went nowhere until that trust ran out, and the first
    request after a restart waited seconds. Chosen free at the first start and kept in
    the node's directory; a port taken since is traded for any by magicsock itself."""
    path = directory / PORT_FILE
    with contextlib.suppress(OSError, ValueError):
        port = int(path.read_text())
        if 0 < port < 65536:
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("", 0))
        port = int(probe.getsockname()[1])
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_private(path, f"{port}\n")
    except OSError:
        return 0  # the node's start says what is wrong with its directory
    return port


def explain(error: str, settings: TsnetSettings) -> str:
    """tsnet's words for a failed join, with what to do about it."""
    lowered = error.lower()
    if "authkey" in lowered or "auth key" in lowered or "expired" in lowered:
        return (
            f"the control server refused the node's key ({error}): make a new auth key "
            f"({KEYS_PAGE}) and set TS_AUTHKEY or tsnet.auth_key_file"
        )
    if "already has a node named" in lowered:
        return (
            f"{error}: remove or rename the other node in the tailnet's admin console, or "
            "pick another --hostname (and delete the state dir's tsnet/ to join anew)"
        )
    if "state dir" in lowered:
        return f"{error}: give tailagent a state dir its user can write (--state-dir)"
    if "control server" in lowered:
        return f"{error}: check the network, tsnet.control_url, and that the server is up"
    return f"the embedded node could not join the tailnet: {error}"


class EmbeddedNode:
    """A `Presence` (see tailagent.tailnet.presence) that is its own tailnet node."""

    trusts_forwarding: bool = False

    def __init__(self, settings: Settings) -> None:
        self._settings = settings.tsnet
        self._service = settings.tailnet_service
        self._state_dir = settings.state_dir
        self._dir = node_dir(settings.state_dir)
        self._verbose = settings.log_level == "debug"
        self._library: NodeLibrary | None = None
        self._handle: int | None = None
        self._localapi: LocalAPI | None = None
        self._proxy: str | None = None
        self._watch: asyncio.Task[None] | None = None
        self.status: dict[str, Any] = {}

    @property
    def localapi(self) -> LocalAPI:
        if self._localapi is None:
            raise RuntimeError("the embedded node has not started")
        return self._localapi

    @property
    def tailnet_proxy(self) -> str | None:
        return self._proxy

    @property
    def own_url(self) -> str | None:
        """The node's own URL, when it also hosts a Tailscale Service (whose URL is the
        one advertised): its siblings carry requests here (cluster/carry.py)."""
        own = self.status.get("url")
        return str(own) if self._service and own else None

    async def start(self, listener: str) -> str | None:
        try:
            self._library = NodeLibrary.load()
        except (LibraryMissing, OSError) as exc:
            raise PresenceError(str(exc)) from None
        key, key_source = auth_key(self._settings)
        if key.startswith("tskey-client-") and not self._settings.advertise_tags:
            raise PresenceError(
                "an OAuth client secret makes tagged nodes only: set tsnet.advertise_tags"
            )
        target = urlsplit(listener).netloc
        answer = await self._library.start(
            {
                "dir": str(self._dir),
                "hostname": self._settings.hostname,
                "auth_key": key,
                "control_url": self._settings.control_url or "",
                "advertise_tags": list(self._settings.advertise_tags),
                "ephemeral": self._settings.ephemeral,
                "https": self._settings.https,
                "target": target,
                "log_file": str(self._dir / "node.log"),
                "verbose": self._verbose,
                "service": self._service,
                "port": kept_port(self._dir),
            }
        )
        if "error" in answer:
            raise PresenceError(explain(answer["error"], self._settings))
        self._handle = int(answer["handle"])
        log.info(
            "joining the tailnet as %s (state %s, key from %s)",
            self._settings.hostname, self._dir, key_source or "the stored node state",
        )  # fmt: skip
        try:
            status = await self._await_running()
        except BaseException:
            await self._close()
            raise
        access = NodeAccess.of(status)
        self._localapi = access.localapi()
        self._proxy = access.proxy
        write_private(
            client_file(self._state_dir),
            json.dumps({
                "localapi": status["localapi"],
                "localapi_cred": status["localapi_cred"],
                "proxy_cred": status["proxy_cred"],
            }) + "\n",
        )  # fmt: skip
        ips = ", ".join(status.get("ips") or [])
        log.info(
            "joined tailnet %s as %s (%s); serving %s",
            status.get("tailnet") or "?", status["dns_name"], ips, status["url"],
        )  # fmt: skip
        self._watch = asyncio.create_task(self._watch_node(), name="tsnet-watch")
        if self._service:
            await self._say_service(status["service_url"])
            return str(status["service_url"])
        return str(status["url"])

    async def _say_service(self, url: str) -> None:
        """Says the service the node hosts, and whether control has approved it."""
        log.info("hosting %s as %s", self._service, url)
        say_unapproved(await self.localapi.status(), self._service, url)

    async def _await_running(self) -> dict[str, Any]:
        assert self._library is not None and self._handle is not None
        deadline = time.monotonic() + START_TIMEOUT
        shown_url = ""
        while True:
            status = await self._library.status(self._handle)
            self._note(status)
            phase = status.get("phase")
            if phase == "running":
                return status
            if phase == "failed":
                raise PresenceError(explain(status.get("error", "?"), self._settings))
            if phase == "needs-login":
                deadline = time.monotonic() + START_TIMEOUT  # a person is on their way
                if status.get("auth_url") and status["auth_url"] != shown_url:
                    shown_url = status["auth_url"]
                    log.warning(
                        "to add this node to your tailnet, open %s (or restart with "
                        "TS_AUTHKEY set); waiting", shown_url,
                    )  # fmt: skip
            elif time.monotonic() > deadline:
                health = "; ".join(status.get("health") or []) or "no word from tsnet"
                raise PresenceError(
                    f"the embedded node did not join the tailnet within {START_TIMEOUT:.0f} s "
                    f"(state {status.get('backend_state', '?')}: {health}); see "
                    f"{self._dir / 'node.log'}"
                )
            await asyncio.sleep(POLL_SECONDS)

    def _note(self, status: dict[str, Any]) -> None:
        """Keeps the last status for /metrics and says when the node's state changes."""
        before = self.status.get("backend_state")
        after = status.get("backend_state")
        if self._watch is not None and before != after:
            if before == "Running":
                log.warning("the embedded node left the Running state: %s", after)
            elif after == "Running":
                log.info("the embedded node is Running again")
        self.status = status
        TSNET_NODE.info(
            {
                "state": str(after or status.get("phase", "")),
                "name": str(status.get("dns_name", "")),
                "ips": ",".join(status.get("ips") or []),
                "tailnet": str(status.get("tailnet", "")),
                "https": str(bool(status.get("https"))).lower(),
            }
        )
        expiry = status.get("key_expiry")
        TSNET_KEY_EXPIRY.set(datetime.fromisoformat(expiry).timestamp() if expiry else 0)
        TSNET_CONNECTIONS.set(status.get("connections", 0))

    async def _watch_node(self) -> None:
        assert self._library is not None and self._handle is not None
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            self._note(await self._library.status(self._handle))

    def callers_line(self) -> str | None:
        return f"on the tailnet: {self.status.get('url')}   (callers known by their node)"

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._localapi is not None:
            client_file(self._state_dir).unlink(missing_ok=True)
            await self._localapi.aclose()
        await self._close()

    async def _close(self) -> None:
        if self._library is None or self._handle is None:
            return
        handle, self._handle = self._handle, None
        answer = await self._library.close(handle, logout=self._settings.ephemeral)
        if answer.get("error"):
            log.warning("closing the embedded node: %s", answer["error"])
        elif self._settings.ephemeral:
            log.info("the ephemeral node logged out and left the tailnet")
