"""Where a push notification may go: into this tailnet, or to a host the operator named.

The caller picks the URL and the server makes the request, so a URL must not aim
the server at its own loopback, the box's private network or a cloud metadata
address. Tailnet names are looked up in tailscaled's own peer list rather than in
DNS, and a delivery connects to the address that was checked, so a name cannot be
re-pointed between the check and the request. The node's own tailnet addresses
count as loopback: they reach this box's services with this node's identity.
"""

from __future__ import annotations

import contextlib
import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tailagent.access.localapi import LocalAPI, LocalAPIUnavailable

TAILNET_RANGES = (
    ipaddress.ip_network("100.64.0.0/10"),
    ipaddress.ip_network("fd7a:115c:a1e0::/48"),
)
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_WHERE_TO = (
    "push URLs must point into the tailnet (100.64.0.0/10, fd7a:115c:a1e0::/48 or a "
    "MagicDNS name of this tailnet) or to a host in push.allowed_hosts"
)


class PushRefused(Exception):
    """A push URL the server will not call; str() says why and what is allowed."""


@dataclass(frozen=True, slots=True)
class Target:
    url: str
    host: str
    # The checked address to connect to; None for an allowlisted host (resolved normally).
    address: str | None


def _kind(address: Address) -> str:
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_private:
        return "a private address"
    if address.is_multicast or address.is_reserved or address.is_unspecified:
        return "not a unicast address"
    return "a public address"


def _in_tailnet(address: Address) -> bool:
    return any(address in network for network in TAILNET_RANGES)


def _nodes(status: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    peers = status.get("Peer") or {}
    return status.get("Self") or {}, list(peers.values()) if isinstance(peers, dict) else []


def _addresses(node: dict[str, Any]) -> list[Address]:
    return [ipaddress.ip_address(ip) for ip in node.get("TailscaleIPs") or []]


class PushTargets:
    def __init__(self, localapi: LocalAPI, allowed_hosts: tuple[str, ...]) -> None:
        self._localapi = localapi
        self._allowed = {entry.lower() for entry in allowed_hosts}

    async def resolve(self, url: str) -> Target:
        """The target to deliver to, or PushRefused saying why not."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise PushRefused(f"push URL {url!r} must be http or https")
        host = (parts.hostname or "").lower()
        if not host:
            raise PushRefused(f"push URL {url!r} has no host")
        try:
            port = parts.port
        except ValueError:
            raise PushRefused(f"push URL {url!r} has a bad port") from None
        if host in self._allowed or (port is not None and f"{host}:{port}" in self._allowed):
            return Target(url, host, None)
        literal: Address | None = None
        with contextlib.suppress(ValueError):
            literal = ipaddress.ip_address(host)
        if literal is not None and not _in_tailnet(literal):
            raise PushRefused(f"{host} is {_kind(literal)}; {_WHERE_TO}")
        me, peers = _nodes(await self._status(host))
        address = literal or self._peer_address(host, me, peers)
        if address in _addresses(me):
            raise PushRefused(f"{host} is this node's own address (loopback); {_WHERE_TO}")
        if not _in_tailnet(address):
            raise PushRefused(f"{host} resolves to {_kind(address)}; {_WHERE_TO}")
        return Target(url, host, str(address))

    async def _status(self, host: str) -> dict[str, Any]:
        try:
            return await self._localapi.status()
        except LocalAPIUnavailable as exc:
            raise PushRefused(f"cannot check push host {host}: {exc}") from None

    @staticmethod
    def _peer_address(host: str, me: dict[str, Any], peers: list[dict[str, Any]]) -> Address:
        """A MagicDNS name's address, from tailscaled's peer list (full or short name)."""
        for node in (me, *peers):
            name = str(node.get("DNSName") or "").rstrip(".").lower()
            addresses = _addresses(node)
            if name and addresses and host in (name, name.split(".", 1)[0]):
                return addresses[0]
        raise PushRefused(f"{host} is not a MagicDNS name of this tailnet; {_WHERE_TO}")
