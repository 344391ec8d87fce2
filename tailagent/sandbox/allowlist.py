"""What a fenced agent may reach through its proxy, decided on names and addresses
alone, with no socket: the proxy (proxy.py) asks these questions of every connection
before it opens one.

With `sandbox.network = "allowlist"` a name must be listed in `sandbox.allow_hosts`
(exactly, or under a `*.` pattern) for the port asked. With `"on"` (`public`) any name
and port will do. Either way, every address a name resolves to must be public, unless
that address or a CIDR around it is listed itself. A listed name never unlocks a
loopback, private, link-local, tailnet, multicast or reserved address, or DNS the agent
controls would point a listed name at the box or the tailnet (DNS rebinding); the box's
own addresses, public ones included, are the proxy's to refuse (it knows them).
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

DEFAULT_PORTS = frozenset({80, 443})
LIST = "sandbox.allow_hosts"
TAILNET = (ipaddress.ip_network("100.64.0.0/10"), ipaddress.ip_network("fd7a:115c:a1e0::/48"))
NAT64 = ipaddress.ip_network("64:ff9b::/96")
LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
NAME = re.compile(rf"{LABEL}(?:\.{LABEL})*")

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def address_kind(address: IPAddress) -> str | None:
    """Why an address is not public ("loopback", "tailnet"...), or None if it is. An IPv6
    address carrying an IPv4 one (mapped, 6to4, NAT64) is judged by the IPv4 one too."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None and (kind := address_kind(embedded)):
            return kind
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("tailnet", any(address in net for net in TAILNET)),
        ("multicast", address.is_multicast),
        ("private", address.is_private),
        ("reserved", address.is_reserved),
        ("non-public", not address.is_global),
    )
    return next((kind for kind, matches in checks if matches), None)


def literal(host: str) -> IPAddress | None:
    """The address `host` spells, IPv4-mapped IPv6 read as the IPv4 it maps; else None."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def split_port(text: str) -> tuple[str, int | None]:
    """`host:port`, `[v6]:port`, a bare IPv6 address or CIDR -> (host, port or None)."""
    if text.startswith("["):
        match = re.fullmatch(r"\[([^\]]+)\](?::(\d{1,5}))?", text)
        if not match:
            raise ValueError(f"not a host: {text}")
        host, port_text = match[1], match[2]
    elif text.count(":") >= 2:
        host, port_text = text, None  # IPv6 without brackets: no port
    elif ":" in text:
        host, port_text = text.rsplit(":", 1)
        if not re.fullmatch(r"\d{1,5}", port_text):
            raise ValueError(f"not a port: {port_text!r} in {text}")
    else:
        host, port_text = text, None
    port = None if port_text is None else int(port_text)
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"not a port: {port} in {text}")
    return host, port


def name_of(host: str) -> str | None:
    """A host name in the one form the allowlist compares (lower case, no final dot)."""
    name = host.lower().removesuffix(".")
    return name if len(name) <= 253 and NAME.fullmatch(name) else None


@dataclass
class Allowlist:
    """`sandbox.allow_hosts`, read. Each entry is a name (`example.com`), a subdomain
    pattern (`*.example.com`: `a.example.com`, `a.b.example.com`, not `example.com`), an
    address or a CIDR (`10.0.0.5`, `10.0.0.0/8`, `[fd00::1]:8080`, `fd00::/8`); a `:port`
    suffix allows that port only, else 80 and 443."""

    names: dict[str, set[int]] = field(default_factory=dict)
    suffixes: list[tuple[str, frozenset[int]]] = field(default_factory=list)
    networks: list[tuple[IPNetwork, frozenset[int]]] = field(default_factory=list)
    # `sandbox.network = "on"`: every name and public address on every port, the entries
    # only unlocking the addresses they name.
    public: bool = False

    @classmethod
    def parse(cls, entries: Iterable[str], *, public: bool = False) -> Allowlist:
        """ValueError, saying which entry, for one that is none of the above."""
        allow = cls(public=public)
        for entry in entries:
            try:
                allow.add(entry)
            except ValueError as exc:
                raise ValueError(f"sandbox.allow_hosts: {entry!r}: {exc}") from None
        return allow

    def add(self, entry: str) -> None:
        host, port = split_port(entry.strip().lower())
        ports = DEFAULT_PORTS if port is None else frozenset({port})
        if host and (host[0].isdigit() or ":" in host):
            with contextlib.suppress(ValueError):
                network = ipaddress.ip_network(host)  # strict: 10.0.0.1/8 is a typo
                self.networks.append((network, ports))
                return
        pattern = host.startswith("*.")
        name = name_of(host[2:] if pattern else host)
        if name is None:
            raise ValueError("not a host name, *.domain, address or CIDR")
        if pattern:
            self.suffixes.append(("." + name, ports))
        else:
            self.names.setdefault(name, set()).update(ports)

    def name_ports(self, name: str) -> set[int] | None:
        """The ports allowed for a host name, or None if no entry names it."""
        ports = set(self.names.get(name, ()))
        for suffix, suffix_ports in self.suffixes:
            if name.endswith(suffix):
                ports |= suffix_ports
        return ports if ports or name in self.names else None

    def names_address(self, address: IPAddress, port: int) -> bool:
        """Whether an entry names this address (or a network around it) on this port."""
        return any(
            port in ports and address.version == net.version and address in net
            for net, ports in self.networks
        )

    def host_refusal(self, host: str, port: int) -> str | None:
        """Why a host name (step 1) or an address spelt out (steps 1 and 2 at once) is
        refused; None if the proxy may go on to resolve and check its addresses."""
        address = literal(host)
        if address is not None:
            if self.names_address(address, port):
                return None
            kind = address_kind(address)
            where = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
            if kind:
                return f'{kind} address refused: {address} (add "{where}" to {LIST} to allow it)'

            if self.public:
                return None
            if not any(address in net for net, _ in self.networks):
                return f'not in sandbox.allow_hosts: {address} (add "{where}" to allow it)'
            return f"port {port} of {address} not in sandbox.allow_hosts"
        if self.public:
            return None
        ports = self.name_ports(host)
        if ports is None:
            shown = host if port in DEFAULT_PORTS else f"{host}:{port}"
            return f'not in sandbox.allow_hosts: {host} (add "{shown}" to allow it)'

        if port not in ports:
            allowed = ", ".join(str(p) for p in sorted(ports))
            return f"port {port} of {host} not in sandbox.allow_hosts (it allows {allowed})"
        return None

    def address_refusal(self, address: IPAddress, port: int, host: str) -> str | None:
        """Why an address `host` resolved to is refused (step 2), or None."""
        kind = address_kind(address)
        if kind is None or self.names_address(address, port):
            return None
        return refused_address(kind, address, port, host)

    def this_box_refusal(self, address: IPAddress, port: int, host: str) -> str | None:
        """Why an address of this box's own interfaces is refused, or None if named."""
        if self.names_address(address, port):
            return None
        return refused_address("this box's own", address, port, host)


def refused_address(kind: str, address: IPAddress, port: int, host: str) -> str:
    """The refusal of an address a name resolved to, and what to do: a name never unlocks
    such an address, so the address itself is what to name."""
    where = f"[{address}]:{port}" if address.version == 6 else f"{address}:{port}"
    return (
        f"{host} resolves to {kind} address {address}, refused: naming {host} does not "
        f'allow it; add the address ("{where}", or a CIDR around it) to sandbox.allow_hosts'
    )
