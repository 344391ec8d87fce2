"""ssh's way out of a fence: its ProxyCommand, SOCKS5 to the fence's own proxy.

    python3 -I -S sshproxy.py PORT HOST HOSTPORT

ssh takes no proxy from the environment, and a fenced agent's only way out is its
conversation's proxy on the fence's 127.0.0.1:PORT (proxy.py), which speaks SOCKS5
beside HTTP. So the fence sets `GIT_SSH_COMMAND` to run ssh with this as its
ProxyCommand: it asks the proxy for HOST:HOSTPORT by name (the proxy resolves it and
decides, as for any connection), then copies stdin to the connection and the connection
to stdout until both ends are done. `git clone git@github.com:...` works as it does
outside; a refused host ends ssh with the proxy's word for it.

It runs inside the fence with whichever python3 is there, isolated (-I -S): the standard
library only, never tailagent.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading

REPLIES = {
    1: "the proxy failed",
    2: "the fence's proxy refuses this host (sandbox.allow_hosts names what it lets through)",
    4: "the host cannot be reached",
    5: "the host refused the connection",
    6: "the connection timed out",
}
USAGE = "usage: sshproxy.py PROXY_PORT HOST PORT"


def connect(proxy_port: int, host: str, port: int) -> socket.socket:
    """A connection to host:port through the SOCKS5 proxy on 127.0.0.1:proxy_port; OSError
    saying why when the proxy does not open one."""
    sock = socket.create_connection(("127.0.0.1", proxy_port), timeout=30)
    name = host.encode("idna")
    sock.sendall(b"\x05\x01\x00" + b"\x05\x01\x00\x03" + bytes([len(name)]) + name)
    sock.sendall(struct.pack("!H", port))
    if _exactly(sock, 2) != b"\x05\x00":
        raise OSError("the fence's proxy does not speak SOCKS5")
    reply = _exactly(sock, 10)
    if reply[1] != 0:
        raise OSError(f"{host}:{port}: {REPLIES.get(reply[1], f'SOCKS reply {reply[1]}')}")
    sock.settimeout(None)
    return sock


def _exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        more = sock.recv(count - len(data))
        if not more:
            raise OSError("the fence's proxy closed the connection")
        data += more
    return data


def relay(sock: socket.socket) -> None:
    """stdin to the connection (then its end), the connection to stdout, until both end."""

    def upward() -> None:
        while data := os.read(0, 65536):
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=upward, daemon=True)
    sender.start()
    while data := sock.recv(65536):
        os.write(1, data)
    sock.close()


def main(argv: list[str]) -> int:
    if len(argv) != 4 or not argv[1].isdigit() or not argv[3].isdigit():
        print(f"sshproxy: {USAGE}", file=sys.stderr)
        return 2
    try:
        sock = connect(int(argv[1]), argv[2], int(argv[3]))
    except (OSError, UnicodeError) as exc:
        print(f"sshproxy: {exc}", file=sys.stderr)
        return 1
    relay(sock)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
