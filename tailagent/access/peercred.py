"""Who owns the other end of a loopback TCP connection (Linux).

`tailscale serve` reaches a TCP backend from tailscaled itself (root, or the
user tailscaled runs as); any other local process is just a local process, and
whatever X-Forwarded-For it sends is its own invention.

The kernel is asked for exactly that one socket over netlink (sock_diag): a
lookup by its addresses, whatever the number of sockets. /proc/net/tcp{,6} is
the fallback where netlink is not allowed (a unit that forbids AF_NETLINK); it
lists every socket, which under a burst of connections costs milliseconds each.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from pathlib import Path

PROC_NET = Path("/proc/net")

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
NO_COOKIE = 0xFFFFFFFF
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_REQUEST = struct.Struct("=BBBBI")  # inet_diag_req_v2 up to its socket id
_UID_OFFSET = _HEADER.size + 4 + 48 + 12  # inet_diag_msg: 4 bytes, the id, 3 counters


def _socket_id(client: tuple[str, int], server: tuple[str, int]) -> tuple[int, bytes]:
    """inet_diag_sockid of the client's end: its address and port as the source."""
    source, destination = ipaddress.ip_address(client[0]), ipaddress.ip_address(server[0])
    family = socket.AF_INET6 if source.version == 6 else socket.AF_INET
    return family, (
        struct.pack("!HH", client[1], server[1])
        + source.packed.ljust(16, b"\0")
        + destination.packed.ljust(16, b"\0")
        + struct.pack("=III", 0, NO_COOKIE, NO_COOKIE)
    )


class NetlinkRefused(OSError):
    """This process may not open a netlink socket at all (a sandbox without
    AF_NETLINK): asking again on every connection would only fail again."""


_netlink_refused = False


def _owner_by_netlink(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid, from the kernel; None when it knows no such socket. Raises OSError
    where netlink is not allowed."""
    family, socket_id = _socket_id(client, server)
    body = _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + socket_id
    message = _HEADER.pack(_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0)
    try:
        link = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
    except OSError as exc:
        raise NetlinkRefused from exc
    with link:
        link.sendto(message + body, (0, 0))
        reply = link.recv(4096)
    _, kind, _, _, _ = _HEADER.unpack_from(reply)
    if kind == NLMSG_ERROR or len(reply) < _UID_OFFSET + 4:
        return None
    (uid,) = struct.unpack_from("=I", reply, _UID_OFFSET)
    return int(uid)


def _encode_address(ip: str, port: int) -> str:
    """An address as /proc/net/tcp writes it (the IP in host-order 32-bit words, then
    the port, in upper-case hex), so rows are matched as text rather than parsed."""
    packed = ipaddress.ip_address(ip).packed
    words = [packed[i : i + 4] for i in range(0, len(packed), 4)]
    host = b"".join(struct.pack(">I", struct.unpack("<I", w)[0]) for w in words)
    return f"{host.hex().upper()}:{port:04X}"


def _owner_by_proc(client: tuple[str, int], server: tuple[str, int]) -> int | None:
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


def connection_owner(client: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The uid owning the client socket of the loopback connection client -> server."""
    global _netlink_refused
    if not _netlink_refused:
        try:
            return _owner_by_netlink(client, server)
        except NetlinkRefused:
            _netlink_refused = True
        except OSError:
            pass
    return _owner_by_proc(client, server)
