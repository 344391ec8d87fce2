"""SOCKS5's side of the fence's proxy: the handshake of RFC 1928, CONNECT only.

HTTP clients reach the internet through the proxy's CONNECT; other TCP (git over ssh, a
database client, anything that takes `socks5h://`) speaks SOCKS5 to the same socket, told
apart by its first byte (5, which no HTTP request line starts with). Only the handshake is
here: the proxy (proxy.py) decides the destination exactly as it decides a CONNECT's, and
this module turns its answer into SOCKS's reply codes. No authentication is offered: the
socket is the fence's own, reachable from that fence alone.

Names are resolved by the proxy, never by the client (`socks5h`): an agent that sends an
address gets that address checked as an address.
"""

from __future__ import annotations

import asyncio
import ipaddress
import struct

VERSION = 5
NO_AUTHENTICATION = 0
NO_ACCEPTABLE_METHOD = 0xFF
CONNECT = 1
IPV4, DOMAIN, IPV6 = 1, 3, 4

SUCCEEDED = 0
GENERAL_FAILURE = 1
NOT_ALLOWED = 2
HOST_UNREACHABLE = 4
CONNECTION_REFUSED = 5
TTL_EXPIRED = 6
COMMAND_NOT_SUPPORTED = 7
ADDRESS_TYPE_NOT_SUPPORTED = 8


class SocksRefusal(Exception):
    """The handshake cannot go on: `code` is the reply to send (None: close without one,
    as before a method was agreed), str() says why."""

    def __init__(self, code: int | None, text: str) -> None:
        super().__init__(text)
        self.code = code


def reply_code(status: int) -> int:
    """The SOCKS reply for the proxy's HTTP-style answer: 403 refused by the rules, 504 a
    time-out, 502 the destination not taking the connection, anything else a failure."""
    return {403: NOT_ALLOWED, 504: TTL_EXPIRED, 502: CONNECTION_REFUSED}.get(
        status, GENERAL_FAILURE
    )


def reply(code: int) -> bytes:
    """A reply with an empty bound address (the client has no use for the proxy's)."""
    return bytes([VERSION, code, 0, IPV4, 0, 0, 0, 0, 0, 0])


async def handshake(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[str, int]:
    """Reads the greeting (its first byte, 5, already read) and a CONNECT request; the
    (host, port) asked for, a name or an address as text. SocksRefusal otherwise."""
    (count,) = await reader.readexactly(1)
    methods = await reader.readexactly(count)
    if NO_AUTHENTICATION not in methods:
        writer.write(bytes([VERSION, NO_ACCEPTABLE_METHOD]))
        raise SocksRefusal(None, "the SOCKS client offers no method without authentication")
    writer.write(bytes([VERSION, NO_AUTHENTICATION]))
    version, command, _, kind = await reader.readexactly(4)
    if version != VERSION:
        raise SocksRefusal(GENERAL_FAILURE, f"SOCKS version {version} in a request")
    if kind == IPV4:
        host = str(ipaddress.IPv4Address(await reader.readexactly(4)))
    elif kind == IPV6:
        host = str(ipaddress.IPv6Address(await reader.readexactly(16)))
    elif kind == DOMAIN:
        (length,) = await reader.readexactly(1)
        host = (await reader.readexactly(length)).decode("ascii", errors="replace")
    else:
        raise SocksRefusal(ADDRESS_TYPE_NOT_SUPPORTED, f"SOCKS address type {kind}")
    (port,) = struct.unpack("!H", await reader.readexactly(2))
    if command != CONNECT:
        raise SocksRefusal(COMMAND_NOT_SUPPORTED, "only SOCKS CONNECT is offered")
    if port == 0:
        raise SocksRefusal(GENERAL_FAILURE, "port 0")
    return host, port
