"""A stand-in for `tailscale serve` in HTTP mode, for one tailnet person's browser.

tailscale serve accepts the browser's connection on the tailnet, connects to the
backend from tailscaled itself (root here, as the test runs as root) and sets
`X-Forwarded-For` to the peer's tailnet IP, dropping any copy the client sent. This
proxy does the same on a loopback port, one proxy per person, so a real browser in
the tests is whoever the fake tailscaled says that IP is. `drop()` cuts every open
connection, as a network fault would, to test that live pages come back.

Each request gets its own upstream connection (`Connection: close` both ways): the
proxy never has to find where one response ends and the next begins.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

HOP_HEADERS = (b"x-forwarded-for", b"connection", b"keep-alive")


def _rewrite(head: bytes, extra: list[bytes]) -> bytes:
    first, *lines = head.split(b"\r\n")
    kept = [
        line for line in lines if line and line.split(b":")[0].strip().lower() not in HOP_HEADERS
    ]
    return b"\r\n".join([first, *kept, *extra, b"Connection: close"]) + b"\r\n\r\n"


class ServeProxy:
    def __init__(self, upstream_port: int, peer_ip: str) -> None:
        self.upstream_port = upstream_port
        self.peer_ip = peer_ip
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ServeProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    def drop(self) -> int:
        """Cuts every open connection (both sides); returns how many were open."""
        future = asyncio.run_coroutine_threadsafe(self._drop(), self._loop)
        return future.result(5)

    async def _drop(self) -> int:
        dropped = len(self._writers)
        for writer in list(self._writers):
            writer.transport.abort()
        return dropped

    def stop(self) -> None:
        self.drop()
        for task in asyncio.all_tasks(self._loop):
            self._loop.call_soon_threadsafe(task.cancel)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        upstream_writer: asyncio.StreamWriter | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            body = await reader.readexactly(length) if length else b""
            up_reader, upstream_writer = await asyncio.open_connection(
                "127.0.0.1", self.upstream_port
            )
            self._writers.add(upstream_writer)
            forwarded = [f"X-Forwarded-For: {self.peer_ip}".encode()]
            upstream_writer.write(_rewrite(head[:-4], forwarded) + body)
            await upstream_writer.drain()
            response_head = await up_reader.readuntil(b"\r\n\r\n")
            writer.write(_rewrite(response_head[:-4], []))
            while chunk := await up_reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            for each in (writer, upstream_writer):
                if each is not None:
                    self._writers.discard(each)
                    with contextlib.suppress(Exception):
                        each.close()
