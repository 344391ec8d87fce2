"""The one way out of a sandbox whose network is `allowlist`: tailagent's proxy.

A fenced agent with a network namespace of its own (`bwrap --unshare-net`) has a loopback
interface and nothing else. Without this module it could reach nothing; with a proxy that
simply forwards, it could reach everything the server can: the tailnet's other machines
(100.64.0.0/10), tailscaled's and the cloud's metadata addresses, whatever listens on the
box's loopback, the home network. So the proxy, running in the server outside the fence,
decides every connection itself (the decisions are allowlist.py's):

1. the host the agent asked for must be named in `sandbox.allow_hosts` (a name exactly,
   case aside; `*.example.com` for its subdomains only; an address or a CIDR), on the
   port the entry names (`host:8443`) or else on 80 or 443;
2. the proxy resolves the name itself, and every address it gets must be public (one
   refused address refuses the request): a loopback, private, link-local, tailnet,
   multicast or reserved address (an IPv4-mapped or NAT64 form of one too) is refused
   unless that address or a CIDR around it is named in `allow_hosts` for that port. A
   name never unlocks such an address, or a name whose DNS the agent controls could
   point at anything (DNS rebinding);
3. it connects to exactly the address it checked, never resolving the name again.

A refusal is a `403` whose one-line body says why, logged once per host at INFO under
`tailagent.sandbox`, and counted in `refused`. The proxy listens on a unix socket (mode
0600) that the sandbox gets bound in; `netbridge.py`, run inside the sandbox ahead of the
agent, turns the sandbox's own `127.0.0.1:PORT` into that socket, and `proxy_env` points
the agent's HTTP clients at it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Self

from tailagent.sandbox import socks, splicing
from tailagent.sandbox.allowlist import Allowlist, IPAddress, literal, name_of, split_port

log = logging.getLogger("tailagent.sandbox")

NETBRIDGE = Path(__file__).resolve().with_name("netbridge.py")
HEAD_LIMIT = 16 * 1024
RESPONSE_HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT = 10.0
CONNECT_TIMEOUT = 10.0
MAX_TUNNELS = 256
CHUNK = 64 * 1024
# After an error answer, what the proxy still reads (and drops) before closing, so the
# client reads the answer instead of a reset for the bytes it had sent on.
LINGER_SECONDS = 1.0
# Refusals are counted per host; past this many hosts, under one name (memory is bounded).
MAX_COUNTED_HOSTS = 1024
OTHER_HOSTS = "(other hosts)"

TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
REQUEST_LINE = re.compile(rf"({TOKEN}) (\S+) HTTP/1\.([01])")
HEADER = re.compile(rf"({TOKEN}):[ \t]*(.*?)[ \t]*")
CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
DIGITS = re.compile(r"[0-9]{1,18}")
CHUNK_SIZE = re.compile(rb"([0-9a-fA-F]{1,15})(?:;[^\r\n]*)?\r?\n")
# The proxy's own headers and those about one hop only (RFC 9110 7.6.1), never forwarded.
HOP_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "proxy-authorization",
        "proxy-authenticate",
        "te",
        "trailer",
        "upgrade",
        "host",
    }
)
REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def bridge_argv(python: str, socket_inside: str, port: int) -> list[str]:
    """The command-line prefix that runs the bridge inside the sandbox; the agent's own
    argv follows it. `python` must run inside the sandbox (a system one: the bridge
    needs the standard library only)."""
    return [python, "-I", "-S", str(NETBRIDGE), socket_inside, str(port), "--"]


def proxy_env(port: int) -> dict[str, str]:
    """The environment that sends the agent's HTTP clients to the bridge on `port`; an
    inherited NO_PROXY is emptied, so nothing skips the proxy by name."""
    url = f"http://127.0.0.1:{port}"
    names = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY")
    env = {name: url for name in names} | {name.lower(): url for name in names}
    return env | {"NO_PROXY": "", "no_proxy": ""}


class ProxyAnswer(Exception):
    """What the proxy answers instead of forwarding: a status and one line for a person."""

    def __init__(self, status: int, text: str, refused_host: str | None = None) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.refused_host = refused_host


@dataclass
class Request:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]

    def values(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key.lower() == name]


async def read_head(
    reader: asyncio.StreamReader, limit: int, what: str, first: bytes = b""
) -> list[str]:
    """The lines of an HTTP head up to its empty line (`first`: its bytes already read);
    EOFError if the peer closed before sending a byte, ProxyAnswer 400/431 if it is cut
    short or too long."""
    lines: list[str] = []
    size = 0
    while True:
        try:
            raw = first + await reader.readuntil(b"\n")
            first = b""
        except asyncio.IncompleteReadError as exc:
            if not lines and not exc.partial and not first:
                raise EOFError from None
            raise ProxyAnswer(400, f"the {what} ended before its head did") from None
        except asyncio.LimitOverrunError:
            raise ProxyAnswer(431, f"{what} head over {limit} bytes") from None
        size += len(raw)
        if size > limit:
            raise ProxyAnswer(431, f"{what} head over {limit} bytes")
        line = raw.removesuffix(b"\n").removesuffix(b"\r").decode("latin-1")
        if line:
            lines.append(line)
        elif lines:
            return lines


def parse_request(lines: list[str]) -> Request:
    match = REQUEST_LINE.fullmatch(lines[0])
    if not match:
        raise ProxyAnswer(400, "not an HTTP/1 request line")
    headers = []
    for line in lines[1:]:
        header = HEADER.fullmatch(line)
        if not header or CONTROL.search(header[2]):
            raise ProxyAnswer(400, "a malformed header line")
        headers.append((header[1], header[2]))
    return Request(match[1], match[2], f"HTTP/1.{match[3]}", headers)


def authority(text: str, default_port: int | None) -> tuple[str, int]:
    """(host, port) of `host:port` or `[v6]:port`; the host a normalized name or address."""
    try:
        host, port = split_port(text)
    except ValueError as exc:
        raise ProxyAnswer(400, str(exc)) from None
    port = port if port is not None else default_port
    if port is None:
        raise ProxyAnswer(400, f"no port in {text}")
    address = literal(host)
    if address is not None:
        return str(address), port
    if text.startswith("[") or (name := name_of(host)) is None:
        raise ProxyAnswer(400, f"not a host: {text}")
    return name, port


def forward_head(request: Request) -> tuple[str, int, bytes]:
    """An absolute-form request's host, port and head for the origin: origin-form target,
    Host from the URI, no hop-by-hop or proxy headers, Connection: close."""
    if not request.target.lower().startswith("http://"):
        raise ProxyAnswer(400, "a proxy request names an http:// URI (https goes by CONNECT)")
    rest = request.target[len("http://") :]
    end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    host_text, path = rest[:end], rest[end:].split("#", 1)[0]
    if "@" in host_text:
        raise ProxyAnswer(400, "no user information in a proxied URI")
    host, port = authority(host_text, 80)
    path = path if path.startswith("/") else "/" + path
    lengths, codings = request.values("content-length"), request.values("transfer-encoding")
    if codings and (lengths or [c.lower() for c in codings] != ["chunked"]):
        raise ProxyAnswer(400, "only a chunked body without Content-Length is forwarded")
    if len(set(lengths)) > 1 or (lengths and not DIGITS.fullmatch(lengths[0])):
        raise ProxyAnswer(400, "a malformed Content-Length")
    dropped = HOP_HEADERS | {
        token.strip().lower()
        for value in request.values("connection")
        for token in value.split(",")
    }
    lines = [f"{request.method} {path} {request.version}", f"Host: {host_text}"]
    lines += [f"{key}: {value}" for key, value in request.headers if key.lower() not in dropped]
    lines += ["Connection: close", "", ""]
    return host, port, "\r\n".join(lines).encode("latin-1")


async def copy_body(
    request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """The request's body, as framed (Content-Length or chunked), to the origin."""
    if request.values("transfer-encoding"):
        await copy_chunked(reader, writer)
    elif lengths := request.values("content-length"):
        await copy_exactly(int(lengths[0]), reader, writer)


async def copy_exactly(
    count: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    while count > 0:
        data = await reader.read(min(count, CHUNK))
        if not data:
            raise EOFError
        writer.write(data)
        await writer.drain()
        count -= len(data)


async def copy_chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A chunked body, its framing checked (the origin must read it as the proxy did)."""
    while True:
        line = await reader.readuntil(b"\n")
        size = CHUNK_SIZE.fullmatch(line)
        if size is None:
            raise EOFError
        writer.write(line)
        if int(size[1], 16) == 0:
            break
        await copy_exactly(int(size[1], 16) + 2, reader, writer)  # the chunk and its CRLF
    while (line := await reader.readuntil(b"\n")).strip():  # trailers
        writer.write(line)
    writer.write(line)
    await writer.drain()


async def relay_response(
    origin: asyncio.StreamReader, origin_writer: asyncio.StreamWriter, client: asyncio.StreamWriter
) -> None:
    """The origin's answer to the client: interim (1xx) heads as they are, the final head
    saying Connection: close, then every byte until the origin closes (spliced where both
    streams allow it; the client's own stream still carries its body the other way)."""
    while True:
        lines = await read_head(origin, RESPONSE_HEAD_LIMIT, "response")
        status = lines[0].split(" ", 2)
        if len(status) < 2 or not status[0].startswith("HTTP/") or not status[1].isdigit():
            raise ProxyAnswer(502, "the origin's answer is not HTTP")
        if status[1].startswith("1") and status[1] != "101":
            client.write("\r\n".join([*lines, "", ""]).encode("latin-1"))
            continue
        kept = [lines[0]] + [
            line
            for line in lines[1:]
            if line.split(":", 1)[0].strip().lower()
            not in {"connection", "keep-alive", "proxy-connection"}
        ]
        client.write("\r\n".join([*kept, "Connection: close", "", ""]).encode("latin-1"))
        break
    if splicing.detachable(origin, origin_writer) and client.get_extra_info("socket"):
        first = splicing.taken(origin, origin_writer)
        with await splicing.socket_of(client) as near, splicing.copy_of(origin_writer) as far:
            await splicing.move(far, near, first)
        return
    while data := await origin.read(CHUNK):
        client.write(data)
        await client.drain()


async def tunnel(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    origin_reader: asyncio.StreamReader,
    origin_writer: asyncio.StreamWriter,
) -> None:
    """Both ways at once, each closing on its own (a client may send EOF and read on);
    spliced, kernel to kernel, where both streams allow it."""
    if splicing.detachable(reader, writer) and splicing.detachable(origin_reader, origin_writer):
        await splicing.both_ways((reader, writer), (origin_reader, origin_writer))
        return
    await asyncio.gather(
        pipe(reader, origin_writer, writer), pipe(origin_reader, writer, origin_writer)
    )


async def pipe(
    source: asyncio.StreamReader, sink: asyncio.StreamWriter, other: asyncio.StreamWriter
) -> None:
    """Bytes one way until EOF, then EOF that way too; a reset ends both ways."""
    try:
        while data := await source.read(CHUNK):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except (OSError, RuntimeError):
        sink.transport.abort()
        other.transport.abort()


class Dialer:
    """Opens the connections the allowlist lets through (see the module's docstring):
    decided on the host asked for, then on every address it resolves to, then made to an
    address checked here, within the connect timeout."""

    def __init__(self, allow: Allowlist, timeout: float) -> None:
        self.allow = allow
        self.timeout = timeout

    async def open(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to `host:port` if the allowlist lets it (else ProxyAnswer 403),
        made to an address checked here, within the connect timeout (else 504)."""
        reason = self.allow.host_refusal(host, port)
        if reason:
            raise ProxyAnswer(403, reason, refused_host=host)
        deadline = asyncio.get_running_loop().time() + self.timeout
        try:
            async with asyncio.timeout_at(deadline):
                targets = await self._resolve(host, port)
                return await self._connect(host, port, targets, deadline)
        except TimeoutError:
            raise ProxyAnswer(504, f"timed out connecting to {host}:{port}") from None

    async def _resolve(self, host: str, port: int) -> list[tuple[int, tuple[object, ...]]]:
        """The (family, socket address) pairs to try, every one of them checked."""
        address = literal(host)
        if address is not None:
            if on_this_box(address) and (
                reason := self.allow.this_box_refusal(address, port, host)
            ):
                raise ProxyAnswer(403, reason, refused_host=host)
            family = socket.AF_INET if address.version == 4 else socket.AF_INET6
            return [(family, (str(address), port))]
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
            )
        except socket.gaierror as exc:
            raise ProxyAnswer(502, f"cannot resolve {host}: {exc.strerror}") from None
        targets: list[tuple[int, tuple[object, ...]]] = []
        for family, _, _, _, sockaddr in infos:
            address = literal(str(sockaddr[0]))
            if address is None:
                raise ProxyAnswer(502, f"{host} resolved to {sockaddr[0]!r}, not an address")
            reason = self.allow.address_refusal(address, port, host)
            if not reason and on_this_box(address):
                reason = self.allow.this_box_refusal(address, port, host)
            if reason:
                raise ProxyAnswer(403, reason, refused_host=host)
            if (family, sockaddr) not in targets:
                targets.append((family, sockaddr))
        return targets

    async def _connect(
        self,
        host: str,
        port: int,
        targets: list[tuple[int, tuple[object, ...]]],
        deadline: float,
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The first of `targets` to accept, in order, each given an equal share of the
        time left (an IPv6 address that drops packets does not use up the IPv4 one's)."""
        loop = asyncio.get_running_loop()
        failure = "no address"
        for index, (family, sockaddr) in enumerate(targets):
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                async with asyncio.timeout((deadline - loop.time()) / (len(targets) - index)):
                    await loop.sock_connect(sock, sockaddr)
                return await asyncio.open_connection(sock=sock, limit=RESPONSE_HEAD_LIMIT)
            except TimeoutError:
                sock.close()
                failure = "timed out"
            except OSError as exc:
                sock.close()
                failure = exc.strerror or str(exc)
            except BaseException:
                sock.close()
                raise
        status = 504 if failure == "timed out" else 502
        raise ProxyAnswer(status, f"cannot connect to {host}:{port}: {failure}")


def on_this_box(address: IPAddress) -> bool:
    """Whether `address` is one of this box's own (a public address of its interfaces too:
    a service listening on every address would answer there). The kernel picks a local
    address as its own source: a UDP socket's connect sends nothing and tells."""
    family = socket.AF_INET if address.version == 4 else socket.AF_INET6
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((str(address), 9))
        except OSError:
            return False  # no route: not this box's either
        return literal(str(probe.getsockname()[0]).split("%")[0]) == address


def bind_long(sock: socket.socket, path: Path) -> None:
    """Binds a unix socket at `path`, however deep: a socket's address holds 107 bytes,
    and a conversation's lies deep in the state dir. A longer one is reached through the
    folder's own descriptor (/proc/self/fd/N/name), which names the same place."""
    if len(os.fsencode(path)) < 100:
        sock.bind(str(path))
        return
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        sock.bind(f"/proc/self/fd/{folder}/{path.name}")
    finally:
        os.close(folder)


def listening_socket(path: Path) -> socket.socket:
    """A unix socket bound at `path` with mode 0600 before it listens, so no one can
    connect while it has the umask's mode. A stale socket there is replaced."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(path.lstat().st_mode):
            raise FileExistsError(f"{path} exists and is not a socket")
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        bind_long(sock, path)
        os.chmod(path, 0o600)
    except BaseException:
        sock.close()
        raise
    return sock


class AllowlistProxy:
    """An HTTP proxy on a unix socket that opens connections to `allow_hosts` only (see the
    module's docstring): `CONNECT host:port` tunnels, and plain `GET http://host/...`
    requests forwarded one per connection."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        allow_hosts: Iterable[str] | Allowlist,
        *,
        label: str = "",
        max_tunnels: int = MAX_TUNNELS,
        head_limit: int = HEAD_LIMIT,
        head_timeout: float = HEAD_TIMEOUT,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        self.path = Path(path)
        self.allow = (
            allow_hosts if isinstance(allow_hosts, Allowlist) else Allowlist.parse(allow_hosts)
        )
        self.label = label
        self.max_tunnels = max_tunnels
        self.head_limit = head_limit
        self.head_timeout = head_timeout
        self.connect_timeout = connect_timeout
        self._dial = Dialer(self.allow, connect_timeout)
        # Refusals per host asked for (past MAX_COUNTED_HOSTS hosts, under OTHER_HOSTS),
        # and connections turned away for being over max_tunnels: for /metrics.
        self.refused: dict[str, int] = {}
        self.turned_away = 0
        self._server: asyncio.Server | None = None
        self._starting: asyncio.Task[None] | None = None
        self._inode: tuple[int, int] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    @property
    def open_connections(self) -> int:
        return len(self._tasks)

    async def start(self) -> None:
        self.start_soon()
        assert self._starting is not None
        await self._starting

    def start_soon(self) -> None:
        """Listens at once, and answers once the event loop next runs: a fence made in
        synchronous code hands its socket to an agent right away (a connection made
        before then waits in the backlog)."""
        sock = listening_socket(self.path)
        sock.listen(max(100, self.max_tunnels))
        info = self.path.stat()
        self._inode = (info.st_dev, info.st_ino)
        self._starting = asyncio.get_running_loop().create_task(self._answer_on(sock))

    async def _answer_on(self, sock: socket.socket) -> None:
        self._server = await asyncio.start_unix_server(
            self._serve, sock=sock, limit=self.head_limit, backlog=max(100, self.max_tunnels)
        )

    async def aclose(self) -> None:
        """Stops listening and ends every open connection, tunnels included."""
        starting, self._starting = self._starting, None
        if starting is not None:
            await asyncio.gather(starting, return_exceptions=True)
        server, self._server = self._server, None
        if server is None:
            return
        self._closing = True
        server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            info = self.path.stat()
            if (info.st_dev, info.st_ino) == self._inode:
                self.path.unlink()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            try:
                await self._answer(reader, writer)
            except ProxyAnswer as answer:
                with contextlib.suppress(OSError, RuntimeError):
                    await self._refuse(reader, writer, answer)
            except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                pass
            await self._close(writer)
        except asyncio.CancelledError:
            if not self._closing:
                raise  # not aclose's own cancel, which ends quietly
        finally:
            self._tasks.discard(task)
            writer.transport.abort()  # nothing if closed already; at once on aclose

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._tasks) > self.max_tunnels:
            self.turned_away += 1
            raise ProxyAnswer(503, f"over {self.max_tunnels} connections through the proxy")
        try:
            async with asyncio.timeout(self.head_timeout):
                first = await reader.read(1)
                if not first:
                    raise EOFError
                if first[0] == socks.VERSION:
                    await self._socks(reader, writer)
                    return
                lines = await read_head(reader, self.head_limit, "request", first)
        except TimeoutError:
            raise ProxyAnswer(408, f"no request head within {self.head_timeout:g} s") from None
        request = parse_request(lines)
        if request.method == "CONNECT":
            host, port = authority(request.target, None)
            origin_reader, origin_writer = await self._dial.open(host, port)
            try:
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await tunnel(reader, writer, origin_reader, origin_writer)
            finally:
                origin_writer.transport.abort()
            return
        host, port, head = forward_head(request)
        origin_reader, origin_writer = await self._dial.open(host, port)
        try:
            await self._forward(request, head, reader, writer, origin_reader, origin_writer)
        finally:
            origin_writer.transport.abort()

    async def _socks(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """A SOCKS5 CONNECT (its first byte read), decided as a CONNECT is; a refusal is
        answered with SOCKS's code and counted, never with an HTTP answer."""
        try:
            host_text, port = await socks.handshake(reader, writer)
        except socks.SocksRefusal as refusal:
            if refusal.code is not None:
                writer.write(socks.reply(refusal.code))
            return
        try:
            host, _ = authority(f"[{host_text}]" if ":" in host_text else host_text, port)
            origin_reader, origin_writer = await self._dial.open(host, port)
        except ProxyAnswer as answer:
            if answer.refused_host is not None:
                self._count(answer.refused_host, answer.text)
            writer.write(socks.reply(socks.reply_code(answer.status)))
            return
        try:
            writer.write(socks.reply(socks.SUCCEEDED))
            await tunnel(reader, writer, origin_reader, origin_writer)
        finally:
            origin_writer.transport.abort()

    async def _forward(
        self,
        request: Request,
        head: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        origin_reader: asyncio.StreamReader,
        origin_writer: asyncio.StreamWriter,
    ) -> None:
        """One request to the origin, its body beside the answer coming back (an origin
        may answer before the body is all sent: a 100 Continue, a 413)."""

        async def send_body() -> None:
            try:
                await copy_body(request, reader, origin_writer)
            except (OSError, EOFError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                origin_writer.transport.abort()  # the origin would wait for the rest

        origin_writer.write(head)
        body = asyncio.create_task(send_body())
        try:
            await relay_response(origin_reader, origin_writer, writer)
        except ProxyAnswer as answer:
            raise ProxyAnswer(502, f"from {request.target}: {answer.text}") from None
        except EOFError:
            raise ProxyAnswer(502, f"{request.target} closed without an answer") from None
        finally:
            body.cancel()
            await asyncio.gather(body, return_exceptions=True)

    async def _refuse(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer: ProxyAnswer
    ) -> None:
        """The answer, then EOF, then whatever the client still sends read and dropped for
        a moment, so it reads the answer rather than a reset."""
        if answer.refused_host is not None:
            self._count(answer.refused_host, answer.text)
        body = answer.text.encode() + b"\n"
        head = (
            f"HTTP/1.1 {answer.status} {REASONS.get(answer.status, 'Error')}\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode() + body)
        if writer.can_write_eof():
            writer.write_eof()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LINGER_SECONDS):
                while await reader.read(CHUNK):
                    pass

    def _count(self, host: str, reason: str) -> None:
        key = host if host in self.refused or len(self.refused) < MAX_COUNTED_HOSTS else OTHER_HOSTS
        if key not in self.refused:
            where = f" ({self.label})" if self.label else ""
            log.info("sandbox proxy%s refused %s: %s", where, host, reason)
        self.refused[key] = self.refused.get(key, 0) + 1

    async def _close(self, writer: asyncio.StreamWriter) -> None:
        """Closed once what was written is out, for a moment at most."""
        writer.close()
        try:
            async with asyncio.timeout(LINGER_SECONDS):
                await writer.wait_closed()
        except (TimeoutError, OSError):
            writer.transport.abort()
