"""Where a push notification may go: to a peer of this tailnet, or a host the operator named.

The caller picks the URL and the server makes the request, so a URL must not aim
the server at its own loopback, the box's private network or a cloud metadata
address. A tailnet address is not enough either: the node's own addresses reach this
box's services with this node's identity, as loopback does; Tailscale's service
address on every node (Quad100: 100.100.100.100, fd7a:115c:a1e0::53) is tailscaled
itself; and an address in the tailnet's range that no peer holds is nobody the
operator knows. So a target is a peer in tailscaled's own peer list, by address or
MagicDNS name (never DNS), and a delivery connects to the address that was checked,
so a name cannot be re-pointed between the check and the request.
"""

from __future__ import annotations

import contextlib
import ipaddress
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tailagent.tailnet.localapi import LocalAPI, LocalAPIUnavailable

TAILNET_RANGES = (
    ipaddress.ip_network("100.64.0.0/10"),
    ipaddress.ip_network("fd7a:115c:a1e0::/48"),
)
QUAD100 = (ipaddress.ip_address("100.100.100.100"), ipaddress.ip_address("fd7a:115c:a1e0::53"))
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_WHERE_TO = (
    "push URLs must point to a peer of this tailnet (its tailnet address or MagicDNS "
    "name) or to a host in push.allowed_hosts"
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
        if literal in QUAD100:
            raise PushRefused(
                f"{host} is Tailscale's own service address (Quad100, tailscaled on this "
                f"node); {_WHERE_TO}"
            )
        me, peers = _nodes(await self._status(host))
        if literal is None:
            address = _peer_address(host.rstrip("."), me, peers)
            if not _in_tailnet(address):  # a peer list that says otherwise is not believed
                raise PushRefused(f"{host} resolves to {_kind(address)}; {_WHERE_TO}")
            return Target(url, host, str(address))
        if literal in _addresses(me):
            raise PushRefused(f"{host} is this node's own address (loopback); {_WHERE_TO}")
        if not any(literal in _addresses(peer) for peer in peers):
            raise PushRefused(f"{host} is a tailnet address that no peer holds; {_WHERE_TO}")
        return Target(url, host, str(literal))

    async def _status(self, host: str) -> dict[str, Any]:
        try:
            return await self._localapi.status()
        except LocalAPIUnavailable as exc:
            raise PushRefused(f"cannot check push host {host}: {exc}") from None


def _named(host: str, node: dict[str, Any]) -> bool:
    """Whether `host` is the node's MagicDNS name, full or short."""
    name = str(node.get("DNSName") or "").rstrip(".").lower()
    return bool(name) and host in (name, name.split(".", 1)[0])


def _peer_address(host: str, me: dict[str, Any], peers: list[dict[str, Any]]) -> Address:
    """A peer's address for its MagicDNS name, from tailscaled's peer list."""
    if _named(host, me):
        raise PushRefused(f"{host} is this node's own name (loopback); {_WHERE_TO}")
    for peer in peers:
        addresses = _addresses(peer)
        if addresses and _named(host, peer):
            return addresses[0]
    raise PushRefused(f"{host} is no peer's MagicDNS name in this tailnet; {_WHERE_TO}")
