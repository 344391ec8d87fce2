"""The per-connection identity algorithm of DESIGN.md ("Identity").

tailscaled is the only authority; no header is believed unless tailscaled itself
sent it:

- unix-socket listener: only tailscaled (root) and the service user can connect,
  so X-Forwarded-For (exactly one IP) is tailscaled's word, and whois(IP) names
  the peer; no X-Forwarded-For means a local process.
- TCP loopback listener: whois(remote ip:port) first. A 200 is a tailnet peer that
  userspace networking forwarded straight to us, and no header counts. A 404 is a
  local connection: X-Forwarded-For counts only when the connecting socket belongs
  to root or tailscaled's user (that is `tailscale serve`); any other local process
  is just local, whatever it sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import time
from dataclasses import dataclass
from typing import Any

from tailagent.access.peercred import connection_owner
from tailagent.access.policy import Seen
from tailagent.tailnet.localapi import LocalAPI, LocalAPIUnavailable, self_dns_name, self_login

log = logging.getLogger(__name__)

CONNECTION_TTL = 600.0
SELF_TTL = 60.0
SELF_RETRY = 5.0
SERVE_TTL = 5.0  # seconds a look at tailscaled's serve config counts for


class BadForwarding(ValueError):
    """An X-Forwarded-For that tailscaled would never send."""


def forwarded_ip(value: str) -> str:
    parts = [p.strip() for p in value.split(",")]
    if len(parts) != 1:
        raise BadForwarding("X-Forwarded-For must name exactly one address")
    try:
        return str(ipaddress.ip_address(parts[0]))
    except ValueError:
        raise BadForwarding(f"X-Forwarded-For is not an IP address: {parts[0]!r}") from None


def _addr_port(ip: str, port: int) -> str:
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


@dataclass(frozen=True, slots=True)
class _Connection:
    """What one TCP connection is, decided on its first request."""

    client: tuple[str, int]  # the very tuple object Hypercorn hands every request on it
    # A forwarded peer's tailnet IP: the peer is fixed for the connection, but what it
    # may do is asked again (whois by IP, cached for seconds), so a grant revoked
    # while a keep-alive connection stays open counts within seconds.
    peer_ip: str | None
    uid: int | None  # the owner of the connecting socket (None: the kernel did not say)
    expires: float


@dataclass
class TailnetSelf:
    """This node as tailscaled describes it: its owner and the names it answers to."""

    owner_login: str | None = None
    dns_name: str | None = None
    addresses: tuple[str, ...] = ()
    # tailscaled uses the kernel's TUN device: then it forwards no peer's raw TCP to
    # loopback (only userspace networking does), so a loopback connection of its own
    # is `tailscale serve`'s and whois on its ip:port could only miss.
    tun: bool = False


def raw_forwards(config: Any) -> list[str]:
    """Every backend a `tailscale serve` TCP entry (--tcp, --tls-terminated-tcp) hands
    a peer's raw bytes to, in every part of the config (background, foreground
    sessions, services)."""
    found: list[str] = []
    if isinstance(config, dict):
        for key, value in config.items():
            if key == "TCPForward" and isinstance(value, str) and value:
                found.append(value)
            else:
                found += raw_forwards(value)
    elif isinstance(config, list):
        for value in config:
            found += raw_forwards(value)
    return found


def forwards_to(target: str, server: Any) -> bool:
    """Whether a serve TCPForward target is this listener (`server`: the ASGI scope's
    `(host, port)`, or `(path, None)` on a unix socket)."""
    host, port = server[0], server[1]
    if port is None:
        return target.removeprefix("unix:") == str(host)
    name, _, number = target.rpartition(":")
    name = name.strip("[]") or "localhost"
    try:
        loopback = name == "localhost" or ipaddress.ip_address(name).is_loopback
    except ValueError:
        loopback = False
    return loopback and number == str(port)


class Resolver:
    def __init__(
        self, localapi: LocalAPI, *, unix_listener: bool, trusts_forwarding: bool = True
    ) -> None:
        self.localapi = localapi
        self._unix = unix_listener
        self._connections: dict[tuple[str, int], _Connection] = {}
        self._owners: dict[tuple[str, int], tuple[Any, int | None]] = {}
        # Whose sockets may carry tailscale serve's X-Forwarded-For: root's and
        # tailscaled's; nobody's when no tailscaled serves this box (an embedded node).
        self._trusted_uids: set[int] = set()
        if trusts_forwarding:
            self._trusted_uids.add(0)
            if localapi.socket_path is not None:
                with contextlib.suppress(OSError):
                    self._trusted_uids.add(os.stat(localapi.socket_path).st_uid)
        # Whose connections may be tailnet peers forwarded in: tailscaled's (netstack),
        # or this very process's (an embedded node). A connection of anyone else is
        # local without asking whois, whose miss costs ~180 ms inside the node and
        # holds its lock meanwhile (tailscale.com/proxymap waits out a registration race).
        self._forwarder_uids = self._trusted_uids if trusts_forwarding else {os.getuid()}
        self.me = TailnetSelf()
        self._me_expires = 0.0
        self._raw: tuple[float, list[str]] = (0.0, [])
        self._raw_lock = asyncio.Lock()

    async def current_self(self) -> TailnetSelf:
        """This node's owner and names, re-read at most once a minute (every few
        seconds while tailscaled is unreachable); the last known answer otherwise."""
        now = time.monotonic()
        if now >= self._me_expires:
            try:
                status = await self.localapi.status()
            except LocalAPIUnavailable:
                self._me_expires = now + SELF_RETRY
                return self.me
            me = status.get("Self") or {}
            self.me = TailnetSelf(
                owner_login=self_login(status),
                dns_name=self_dns_name(status),
                addresses=tuple(me.get("TailscaleIPs") or ()),
                tun=bool(status.get("TUN")),
            )
            self._me_expires = now + SELF_TTL
        return self.me

    async def _forwarded(self, header: str, how: str) -> Seen:
        ip = forwarded_ip(header)
        peer = await self.localapi.whois(ip)
        if peer is None:
            return Seen(None, f"{how}, but tailscaled knows no peer {ip}")
        return Seen(peer, how)

    async def _raw_forward_here(self, server: Any) -> str | None:
        """The `tailscale serve` TCP entry that forwards a peer's raw bytes to this
        listener, if any. Those connections come from tailscaled too, but every header
        on them is the peer's own, and tailscaled does not register them for whois
        (ipn/ipnlocal/serve.go): with one in place, X-Forwarded-For proves nothing."""
        if time.monotonic() < self._raw[0]:  # the usual case: no lock, no await
            return next((t for t in self._raw[1] if forwards_to(t, server)), None)
        async with self._raw_lock:  # a burst asks tailscaled once
            return await self._raw_forward_checked(server)

    async def _raw_forward_checked(self, server: Any) -> str | None:
        now = time.monotonic()
        expires, targets = self._raw
        if now >= expires:
            config, _ = await self.localapi.serve_config()
            fresh = raw_forwards(config)
            if fresh and fresh != targets:  # said once, as it appears
                log.warning(
                    "a `tailscale serve` TCP entry forwards peers' raw bytes (%s): if it "
                    "reaches this listener, X-Forwarded-For is ignored, since a peer could "
                    "write any header; serve HTTP instead (tailscale serve status)",
                    ", ".join(fresh),
                )
            targets = fresh
            self._raw = (now + SERVE_TTL, targets)
        return next((t for t in targets if forwards_to(t, server)), None)

    async def _trusted_forwarding(
        self, header: str, how: str, server: Any, asked: asyncio.Future[Seen] | None = None
    ) -> Seen:
        if server and await self._raw_forward_here(server) is not None:
            return Seen(None, "X-Forwarded-For ignored: serve forwards raw TCP here")
        return await (asked if asked is not None else self._forwarded(header, how))

    async def seen(self, scope: dict[str, Any], forwarded_for: str) -> Seen:
        """Raises LocalAPIUnavailable when tailscaled cannot say (callers fail closed)."""
        server = scope.get("server")
        if self._unix:
            if forwarded_for:
                return await self._trusted_forwarding(
                    forwarded_for, "tailscale serve (unix socket)", server
                )
            return Seen(None, "local process on the unix socket")
        client = scope.get("client")
        if not client or not server:
            return Seen(None, "connection without addresses")
        # Who X-Forwarded-For names is asked at once, beside the connection's own whois:
        # in a burst, tailscaled answers the ip:port misses one at a time, and an answer
        # asked for only after its own miss would queue behind all the others.
        asked = None
        if forwarded_for and not self._known(client):
            asked = asyncio.ensure_future(self._forwarded(forwarded_for, "tailscale serve"))
        try:
            connection = await self._connection(client, server)
            if connection.peer_ip is not None:
                peer = await self.localapi.whois(connection.peer_ip)
                if peer is None:
                    return Seen(None, f"tailnet connection from {connection.peer_ip}, gone since")
                return Seen(peer, "tailnet connection")
            uid = connection.uid
            if forwarded_for and uid in self._trusted_uids:
                return await self._trusted_forwarding(
                    forwarded_for, "tailscale serve", server, asked
                )
            ignored = ", X-Forwarded-For ignored" if forwarded_for else ""
            return Seen(None, f"local process (uid {uid}){ignored}")
        finally:
            if asked is not None and not asked.done():
                asked.cancel()
            elif asked is not None and not asked.cancelled():
                asked.exception()  # a bad header is an error only where it is believed

    def _known(self, client: Any) -> _Connection | None:
        """This very connection, if an earlier request on it was seen. Ports are reused:
        an entry counts only for the same connection, which Hypercorn marks by handing
        every one of its requests the same tuple."""
        cached = self._connections.get((client[0], client[1]))
        if cached is not None and cached.client is client and cached.expires > time.monotonic():
            return cached
        return None

    async def local_owner(self, scope: dict[str, Any]) -> int | None:
        """The unix user whose process opened this connection, when it is a process on
        this box (loopback TCP, not a tailnet peer forwarded in): what a desk sign-in is
        bound to. None where the kernel cannot be asked: on a unix socket, Hypercorn
        hands the app no socket to read SO_PEERCRED from."""
        client, server = scope.get("client"), scope.get("server")
        if self._unix or not client or not server:
            return None
        try:
            connection = await self._connection(client, server)
        except LocalAPIUnavailable:
            # No tailscaled, so no tailnet peer is forwarded in: the connection is local.
            return self._owner(client, server)
        return connection.uid if connection.peer_ip is None else None

    def _owner(self, client: Any, server: Any) -> int | None:
        """Whose this very connection is, asked of the kernel once per connection: a
        connection whose whois failed (no tailscaled) is not kept, and its next request
        asks whois again, but its owner cannot have changed."""
        key = (client[0], client[1])
        kept = self._owners.get(key)
        if kept is not None and kept[0] is client:
            return kept[1]
        uid = connection_owner(key, (server[0], server[1]))
        self._owners[key] = (client, uid)
        if len(self._owners) > 4096:
            self._owners = dict(list(self._owners.items())[2048:])
        return uid

    async def _connection(self, client: Any, server: Any) -> _Connection:
        if (cached := self._known(client)) is not None:
            return cached
        key = (client[0], client[1])
        now = time.monotonic()
        # The owner first (the kernel answers in microseconds): only a forwarder's
        # connection can be a tailnet peer, so only it is worth a whois.
        uid = self._owner(client, server)
        peer = None
        if (uid is None or uid in self._forwarder_uids) and not (await self.current_self()).tun:
            peer = await self.localapi.whois(_addr_port(client[0], client[1]), "tcp")
        if peer is not None and peer.node.addresses:
            peer_ip = peer.node.addresses[0].split("/", 1)[0]
            entry = _Connection(client, peer_ip, uid, now + CONNECTION_TTL)
        else:
            entry = _Connection(client, None, uid, now + CONNECTION_TTL)
        self._connections[key] = entry
        if len(self._connections) > 4096:
            self._connections = {k: v for k, v in self._connections.items() if v.expires > now}
        return entry
