"""The sandbox's end of its one way out: 127.0.0.1:PORT inside, the proxy's socket behind.

    python3 -I -S netbridge.py UNIX_SOCKET PORT -- argv...

A sandbox with a network namespace of its own has a loopback interface and nothing else;
tailagent's proxy (proxy.py) listens outside on a unix socket bound into the sandbox. HTTP
clients speak to a proxy by host and port, not by socket path, so this bridge listens on the
sandbox's own 127.0.0.1:PORT (and [::1]:PORT where IPv6 is up), copies every connection
byte for byte to the unix socket, then runs `argv` (the agent) as its child with the same
stdin, stdout and stderr. It listens before the child starts, so the agent's first request
finds it; it passes SIGTERM, SIGINT and SIGHUP on to the child and exits with the child's
status (128 + the signal if a signal ended it); 125 if it could not start at all, 126 or
127 if the child could not be run. It sets nothing else: the proxy's address reaches the
agent in its environment (proxy.proxy_env).

It runs inside the sandbox with whichever python3 is there, isolated (-I -S), so it
imports the standard library only, never tailagent.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time

CHUNK = 64 * 1024
BACKLOG = 128
# What waits for a socket before the bridge stops reading its peer (backpressure).
BUFFERED = 256 * 1024
# Connections open at once; past it a new one is closed at once.
MAX_CONNECTIONS = 1024
UPSTREAM_TIMEOUT = 5.0
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
USAGE = "usage: netbridge.py UNIX_SOCKET PORT -- PROGRAM [ARG...]"


def listen(port: int) -> list[socket.socket]:
    """127.0.0.1:port, and [::1]:port if this namespace has IPv6 loopback."""
    listeners = []
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 in this kernel
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind((host, port))
            sock.listen(BACKLOG)
        except OSError:
            sock.close()
            if family == socket.AF_INET:
                raise
            continue  # IPv6 off in this namespace: 127.0.0.1 is enough
        listeners.append(sock)
    return listeners


class Side:
    """One socket of a connection, and what waits to be sent to it."""

    __slots__ = (
        "closed",
        "events",
        "out",
        "peer",
        "reading",
        "shut_when_sent",
        "sock",
        "wrote_eof",
    )

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.peer = self
        self.out = bytearray()
        self.reading = True  # until this socket's EOF, or its peer no longer takes bytes
        self.shut_when_sent = False  # its peer sent EOF: pass it on once `out` is sent
        self.wrote_eof = False  # nothing more goes to this socket
        self.events = 0
        self.closed = False


class Bridge:
    """One thread, one selector: accepts on the listeners and copies each connection to
    the proxy's socket at `path` and back. No thread per connection: a thread handing the
    GIL to another costs a connection a millisecond on a busy box (bench_sandbox_network)."""

    def __init__(self, path: str, listeners: list[socket.socket]) -> None:
        self.path = path
        self.listeners = listeners
        self.selector = selectors.DefaultSelector()
        self.connections = 0
        self.resume_at = 0.0
        self.told = False
        for listener in listeners:
            listener.setblocking(False)
            self.selector.register(listener, selectors.EVENT_READ)

    def run(self) -> None:
        while True:
            timeout = None
            if self.resume_at:
                timeout = self.resume_at - time.monotonic()
                if timeout <= 0:
                    self.resume_at, timeout = 0.0, None
                    for listener in self.listeners:
                        self.selector.register(listener, selectors.EVENT_READ)
            for key, mask in self.selector.select(timeout):
                side = key.data
                if side is None:
                    self.accept(key.fileobj)  # type: ignore[arg-type]
                    continue
                if mask & selectors.EVENT_READ and not side.closed:
                    self.read(side)
                if mask & selectors.EVENT_WRITE and not side.closed:
                    self.send(side)
                    self.update(side)
                    self.update(side.peer)

    def accept(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError:  # out of descriptors: stop accepting while some end
                for each in self.listeners:
                    self.selector.unregister(each)
                self.resume_at = time.monotonic() + 0.1
                return
            if self.connections >= MAX_CONNECTIONS:
                conn.close()
                continue
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.settimeout(UPSTREAM_TIMEOUT)  # the proxy accepts at once, or is gone
                upstream.connect(self.path)
            except OSError as exc:
                conn.close()
                upstream.close()
                self.say(f"cannot reach the proxy at {self.path}: {exc}")
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # the client's own call
            near, far = Side(conn), Side(upstream)
            near.peer, far.peer = far, near
            self.connections += 1
            self.update(near)
            self.update(far)

    def read(self, side: Side) -> None:
        try:
            data = side.sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # a reset: both ways end
            self.close(side)
            return
        if not data:  # EOF: passed on, and the other way goes on (a client may shut and read on)
            side.reading = False
            side.peer.shut_when_sent = True
        self.send(side.peer, data)
        self.update(side)
        self.update(side.peer)

    def send(self, side: Side, data: bytes = b"") -> None:
        """What waits for this socket and then `data`, as much as it takes now; its EOF
        once all is sent. If it takes no more bytes, only the way to it ends. With nothing
        waiting, `data` is sent as it was read: only what the socket does not take is
        copied to wait (a copy per read, and the buffer's moves, were a quarter of the
        bridge's time on a download)."""
        if data and not side.out and not side.wrote_eof:
            try:
                sent = side.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError:
                sent = len(data)
                self.failed(side)
            if sent < len(data):
                side.out += memoryview(data)[sent:]
        elif data and not side.wrote_eof:
            side.out += data
        if side.out:
            try:
                del side.out[: side.sock.send(side.out)]
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.failed(side)
        if not side.out and side.shut_when_sent:
            side.shut_when_sent, side.wrote_eof = False, True
            with contextlib.suppress(OSError):
                side.sock.shutdown(socket.SHUT_WR)

    def failed(self, side: Side) -> None:
        """This socket takes no more bytes: the way to it ends, what waits is dropped."""
        side.out.clear()
        side.peer.reading = False
        side.shut_when_sent, side.wrote_eof = False, True

    def update(self, side: Side) -> None:
        """What the selector waits for on this socket; both closed once both ways ended."""
        if side.closed:
            return
        if side.wrote_eof and side.peer.wrote_eof:
            self.close(side)
            return
        events = selectors.EVENT_WRITE if side.out else 0
        if side.reading and len(side.peer.out) < BUFFERED:  # else: wait for the peer
            events |= selectors.EVENT_READ
        if events != side.events:
            if not side.events:
                self.selector.register(side.sock, events, side)
            elif not events:
                self.selector.unregister(side.sock)
            else:
                self.selector.modify(side.sock, events, side)
            side.events = events

    def close(self, side: Side) -> None:
        for each in (side, side.peer):
            if each.events:
                self.selector.unregister(each.sock)
            each.events, each.closed = 0, True
            each.sock.close()
        self.connections -= 1

    def say(self, text: str) -> None:
        if not self.told:  # once: the agent's stderr is not the bridge's log
            self.told = True
            print(f"netbridge: {text}", file=sys.stderr, flush=True)


def run(argv: list[str]) -> int:
    """The child, signals passed on to it; its exit status, or 128 + the signal that
    ended it."""
    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if child is None:
            pending.append(signum)  # arrived while the child was being started
            return
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)
    try:
        child = subprocess.Popen(argv)
    except FileNotFoundError as exc:
        print(f"netbridge: {exc}", file=sys.stderr, flush=True)
        return 127
    except OSError as exc:
        print(f"netbridge: {exc}", file=sys.stderr, flush=True)
        return 126
    for early in pending:
        forward(early, None)
    status = child.wait()
    return 128 - status if status < 0 else status


def main(argv: list[str]) -> int:
    port = int(argv[2]) if len(argv) > 2 and argv[2].isascii() and argv[2].isdigit() else 0
    if len(argv) < 5 or argv[3] != "--" or not 0 < port < 65536:
        print(f"netbridge: {USAGE}", file=sys.stderr, flush=True)
        return 125
    path = argv[1]
    try:
        listeners = listen(port)
    except OSError as exc:
        print(f"netbridge: cannot listen on 127.0.0.1:{port}: {exc}", file=sys.stderr)
        return 125
    threading.Thread(target=Bridge(path, listeners).run, daemon=True).start()
    return run(argv[4:])


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the pumps are daemon threads: no waiting on connections left open
