"""Who owns the other end of a loopback TCP connection (Linux, /proc/net/tcp{,6}).

`tailscale serve` reaches a TCP backend from tailscaled itself (root, or the
user tailscaled runs as); any other local process is just a local process, and
whatever X-Forwarded-For it sends is its own invention.
"""

from __future__ import annotations

import ipaddress
import struct
from pathlib import Path

PROC_NET = Path("/proc/net")


def _encode_address(ip: str, port: int) -> str:
    """An address as /proc/net/tcp writes it (the IP in host-order 32-bit words, then
    the port, in upper-case hex), so rows are matched as text rather than parsed."""
    packed = ipaddress.ip_address(ip).packed
    words = [packed[i : i + 4] for i in range(0, len(packed), 4)]
    host = b"".join(struct.pack(">I", struct.unpack("<I", w)[0]) for w in words)
    return f"{host.hex().upper()}:{port:04X}"


def connection_owner(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the client socket of the loopback connection client -> server."""
    client_ip = str(ipaddress.ip_address(client[0]))
    table = "tcp6" if ":" in client_ip else "tcp"
    try:
        text = (PROC_NET / table).read_text()
    except OSError:
        return None
    local = _encode_address(client_ip, client[1])
    remote_port = f":{server[1]:04X}"
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[1] == local and fields[2].endswith(remote_port):
            return int(fields[7])
    return None
