"""A proxied connection's bytes moved kernel to kernel, never through Python.

A download through a fence crosses the proxy (proxy.py, in the server's event loop).
Copied there with `read` and `write`, every byte comes up into a Python object and goes
back down, and the server's loop spends its time on that rather than on its requests: a
100 MB download took the fence's loopback to 0.3x of a direct one, with the server busy
throughout (docs/measured.md). `os.splice` moves the bytes from one socket to a pipe and
from the pipe to the other socket by reference to the kernel's pages; Python only asks.

Once a stream's head is read, `taken` stops asyncio reading it (returning what its reader
had already taken in) and `socket_of` gives a copy of its socket once asyncio has sent all
it held; `move` carries one direction from there to EOF, and `both_ways` is a tunnel.
Where a stream is not `detachable` (its transport has no socket, or asyncio keeps its
buffer elsewhere), the caller copies as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
from typing import cast

# Each direction's pipe: what may wait between the two sockets. The kernel lends a user
# without CAP_SYS_RESOURCE pipe-user-pages-soft (64 MiB) of pipes; past it, `move` copies.
PIPE_SIZE = 256 * 1024
FLAGS = os.SPLICE_F_MOVE | os.SPLICE_F_NONBLOCK
CHUNK = 64 * 1024  # what `move` copies at a time where it has no pipe
YIELD_EVERY = 16  # moves in a row before the loop's other tasks get a turn


def detachable(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """Whether this stream's socket can be taken from asyncio: its transport has one, and
    its reader keeps what it took in where `taken` finds it. StreamReader has no public
    peek, so that is a private attribute; it has been a bytearray from Python 3.4 to 3.14,
    and anything else is not detached."""
    return (
        isinstance(getattr(reader, "_buffer", None), bytearray)
        and writer.get_extra_info("socket") is not None
    )


def taken(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """What a detachable stream's reader had taken in; asyncio reads no more of it."""
    cast(asyncio.Transport, writer.transport).pause_reading()  # a stream's reads both ways
    buffered: bytearray = reader._buffer  # type: ignore[attr-defined]  # see detachable
    held = bytes(buffered)
    buffered.clear()
    return held


async def socket_of(writer: asyncio.StreamWriter) -> socket.socket:
    """A copy of a detachable stream's socket, once asyncio has sent all it held for it:
    bytes sent on the copy come after those."""
    writer.transport.set_write_buffer_limits(high=0)
    await writer.drain()  # with a high mark of 0: until asyncio holds nothing to send
    return copy_of(writer)


def copy_of(writer: asyncio.StreamWriter) -> socket.socket:
    """A copy of a detachable stream's socket, to read from (asyncio may still write)."""
    own = socket.socket(fileno=os.dup(writer.get_extra_info("socket").fileno()))
    own.setblocking(False)
    return own


async def both_ways(
    client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    origin: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    """A tunnel between two detachable streams, each way ending on its own EOF (a client
    may send EOF and read on); a reset on either ends both."""
    left = {id(stream): taken(*stream) for stream in (client, origin)}
    near = await socket_of(client[1])
    with near, await socket_of(origin[1]) as far:
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(move(near, far, left[id(client)]))
                group.create_task(move(far, near, left[id(origin)]))
        except* OSError:
            pass


async def move(source: socket.socket, sink: socket.socket, first: bytes = b"") -> None:
    """`first`, then every byte of `source` until its EOF, to `sink`; then EOF to `sink`.
    OSError if either socket fails (a reset), with nothing more sent."""
    loop = asyncio.get_running_loop()
    if first:
        await loop.sock_sendall(sink, first)
    ends = pipe()
    if ends is None:
        while data := await loop.sock_recv(source, CHUNK):
            await loop.sock_sendall(sink, data)
    else:
        try:
            await carry(source, sink, *ends)
        finally:
            os.close(ends[0])
            os.close(ends[1])
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def pipe() -> tuple[int, int] | None:
    """A pipe of PIPE_SIZE (read end, write end), or None where the kernel lends none: a
    user past pipe-user-pages-soft gets pipes of two pages, slower than copying."""
    read_end, write_end = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    except OSError:
        os.close(read_end)
        os.close(write_end)
        return None
    return read_end, write_end


async def carry(source: socket.socket, sink: socket.socket, read_end: int, write_end: int) -> None:
    """Every byte of `source` to `sink` through the pipe, until `source`'s EOF. A pipe
    holds so many pieces, not bytes: it can be full with bytes to spare. It is taken for
    full when a source gave nothing while it held some, until some is sent; else a
    readable source would wake this loop for nothing, on and on."""
    held, ended, full, turns = 0, False, False, 0
    while not ended or held:
        moved = False
        if not ended and not full and held < PIPE_SIZE:
            try:
                taken = os.splice(source.fileno(), write_end, PIPE_SIZE - held, flags=FLAGS)
            except BlockingIOError:
                full = held > 0
            else:
                ended, held, moved = taken == 0, held + taken, True
        if held:
            try:
                sent = os.splice(read_end, sink.fileno(), held, flags=FLAGS)
            except BlockingIOError:
                pass
            else:
                held, full, moved = held - sent, full and not sent, True
        if not moved:
            wanted = not ended and not full and held < PIPE_SIZE
            await ready(source if wanted else None, sink if held else None)
        elif (turns := turns + 1) % YIELD_EVERY == 0:
            await asyncio.sleep(0)  # a fast origin does not keep the loop from the rest


async def ready(readable: socket.socket | None, writable: socket.socket | None) -> None:
    """Until `readable` has bytes or `writable` takes some (either may be None)."""
    loop = asyncio.get_running_loop()
    waiter = loop.create_future()

    def wake() -> None:
        if not waiter.done():
            waiter.set_result(None)

    if readable is not None:
        loop.add_reader(readable.fileno(), wake)
    if writable is not None:
        loop.add_writer(writable.fileno(), wake)
    try:
        await waiter
    finally:
        if readable is not None:
            loop.remove_reader(readable.fileno())
        if writable is not None:
            loop.remove_writer(writable.fileno())
