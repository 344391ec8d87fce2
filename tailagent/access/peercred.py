"""Who owns the other end of a loopback TCP connection (Linux, /proc/net/tcp{,6}).

`tailscale serve` reaches a TCP backend from tailscaled itself (root, or the
user tailscaled runs as); any other local process is just a local process, and
whatever X-Forwarded-For it sends is its own invention.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from pathlib import Path

PROC_NET = Path("/proc/net")


def _decode_address(text: str) -> tuple[str, int]:
    """A /proc/net/tcp address: the IP in host-order 32-bit words, then the port."""
    host_hex, port_hex = text.split(":")
    raw = bytes.fromhex(host_hex)
    words = [raw[i : i + 4] for i in range(0, len(raw), 4)]
    packed = b"".join(struct.pack("<I", struct.unpack(">I", w)[0]) for w in words)
    family = socket.AF_INET if len(packed) == 4 else socket.AF_INET6
    return str(ipaddress.ip_address(socket.inet_ntop(family, packed))), int(port_hex, 16)


def connection_owner(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the client socket of the loopback connection client -> server."""
    client_ip = str(ipaddress.ip_address(client[0]))
    table = "tcp6" if ":" in client_ip else "tcp"
    try:
        lines = (PROC_NET / table).read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) < 8:
            continue
        local, remote = _decode_address(fields[1]), _decode_address(fields[2])
        if local == (client_ip, client[1]) and remote[1] == server[1]:
            return int(fields[7])
    return None
