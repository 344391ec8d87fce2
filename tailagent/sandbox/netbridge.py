"""The sandbox's end of its one way out: 127.0.0.1:PORT inside, the proxy's socket behind.

    python3 -I -S netbridge.py UNIX_SOCKET PORT -- argv...

A sandbox with a network namespace of its own has a loopback interface and nothing else;
tailagent's proxy (proxy.py) listens outside on a unix socket bound into the sandbox.
HTTP clients speak to a proxy by host and port, not by socket path, so this bridge
listens on the sandbox's own 127.0.0.1:PORT (and [::1]:PORT where IPv6 is up), carries
every connection to the unix socket and back (spliced through pipes where it can), then
runs `argv` (the agent) as its child with the same stdin, stdout and stderr. It listens
before the child starts, so the agent's first request finds it; it passes SIGTERM,
SIGINT and SIGHUP on to the child and exits with the child's status (128 + the signal if
a signal ended it); 125 if it could not start at all, 126 or 127 if the child could not
be run. It sets nothing else: the proxy's address reaches the agent in its environment
(proxy.proxy_env).

It runs inside the sandbox with whichever python3 is there, isolated (-I -S), so it
imports the standard library only, never tailagent.
"""

from __future__ import annotations

import contextlib
import fcntl
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
# What waits for a socket before the bridge stops reading its peer (backpressure): a
# pipe's size, or a buffer's where there is no pipe.
BUFFERED = 256 * 1024
F_SETPIPE_SZ = 1031  # fcntl's name for it came in Python 3.10
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


class Buffer:
    """Bytes on their way to one socket, held in this process: where the kernel lends no
    pipe (a Python before 3.10 has no os.splice; a user past its pipes or descriptors)."""

    def __init__(self) -> None:
        self.data = bytearray()

    @property
    def size(self) -> int:
        return len(self.data)

    def has_room(self) -> bool:
        return len(self.data) < BUFFERED

    def fill(self, source: socket.socket) -> int:
        """Bytes read from `source` into this, 0 at its EOF; BlockingIOError if none."""
        data = source.recv(CHUNK)
        self.data += data
        return len(data)

    def empty_into(self, sink: socket.socket) -> None:
        del self.data[: sink.send(self.data)]

    def drop(self) -> None:
        self.data.clear()

    def close(self) -> None:
        self.data.clear()


class Pipe:
    """Bytes on their way to one socket, held in a pipe: os.splice moves them from the
    other socket and on to this one by reference to the kernel's pages, never through
    Python (copied through Python, the bridge was half a fenced download's time)."""

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:  # past pipe-user-pages-soft, a user's pipes hold two pages: a buffer is faster
            fcntl.fcntl(self.write_end, F_SETPIPE_SZ, BUFFERED)
        except OSError:
            self.close()
            raise
        self.room = BUFFERED
        self.size = 0
        # A pipe holds so many pieces, not so many bytes: one can be full with bytes to
        # spare (small packets). Full once a readable socket gave it nothing, until some
        # of it is sent; else the selector would wake the bridge for that socket forever.
        self.full = False

    def has_room(self) -> bool:
        return not self.full and self.size < self.room

    def fill(self, source: socket.socket) -> int:
        flags = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
        try:
            moved = os.splice(source.fileno(), self.write_end, self.room - self.size, flags=flags)
        except BlockingIOError:
            self.full = self.size > 0  # empty, it was the socket that had nothing
            raise
        self.size += moved
        return moved

    def empty_into(self, sink: socket.socket) -> None:
        flags = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
        sent = os.splice(self.read_end, sink.fileno(), self.size, flags=flags)
        self.size -= sent
        self.full = self.full and not sent

    def drop(self) -> None:
        self.size = 0  # never sent: the pipe is closed with its connection

    def close(self) -> None:
        os.close(self.read_end)
        os.close(self.write_end)


def waiting_room() -> Pipe | Buffer:
    """A pipe where the kernel lends one of BUFFERED bytes, else a buffer of the bridge's
    own."""
    if hasattr(os, "splice"):
        with contextlib.suppress(OSError):
            return Pipe()
    return Buffer()


class Side:
    """One socket of a connection, and what waits to be sent to it."""

    __slots__ = (
        "closed",
        "events",
        "peer",
        "reading",
        "shut_when_sent",
        "sock",
        "waiting",
        "wrote_eof",
    )

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.peer = self
        self.waiting = waiting_room()
        self.reading = True  # until this socket's EOF, or its peer no longer takes bytes
        self.shut_when_sent = False  # its peer sent EOF: pass it on once all waiting is sent
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
            got = side.peer.waiting.fill(side.sock)
        except (BlockingIOError, InterruptedError):
            self.update(side)  # a full pipe: read again once some of it is sent
            return
        except OSError:  # a reset: both ways end
            self.close(side)
            return
        if not got:  # EOF: passed on, and the other way goes on (a client may shut and read on)
            side.reading = False
            side.peer.shut_when_sent = True
        self.send(side.peer)
        self.update(side)
        self.update(side.peer)

    def send(self, side: Side) -> None:
        """What waits for this socket, as much as it takes now; its EOF once all is sent.
        If it takes no more bytes, only the way to it ends."""
        if side.waiting.size and not side.wrote_eof:
            try:
                side.waiting.empty_into(side.sock)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                self.failed(side)
        if not side.waiting.size and side.shut_when_sent:
            side.shut_when_sent, side.wrote_eof = False, True
            with contextlib.suppress(OSError):
                side.sock.shutdown(socket.SHUT_WR)

    def failed(self, side: Side) -> None:
        """This socket takes no more bytes: the way to it ends, what waits is dropped."""
        side.waiting.drop()
        side.peer.reading = False
        side.shut_when_sent, side.wrote_eof = False, True

    def update(self, side: Side) -> None:
        """What the selector waits for on this socket; both closed once both ways ended."""
        if side.closed:
            return
        if side.wrote_eof and side.peer.wrote_eof:
            self.close(side)
            return
        events = selectors.EVENT_WRITE if side.waiting.size else 0
        if side.reading and side.peer.waiting.has_room():  # else: wait for the peer
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
            each.waiting.close()
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
