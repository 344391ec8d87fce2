"""Who gets in: every source of a request, on both listener kinds, against the policy.

Each row is a real request to a real server whose tailscaled is the fake one in
tests/fake_tailscaled.py. The forging client of the local-process rows really runs
as another Unix user (`runuser -u nobody`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import RunningServer, start_server
from tests.tailnet import (
    NODE_DNS,
    OWNER,
    FakeTailscaled,
    curl_as_nobody,
    free_port,
    refusal,
    request,
    send_message,
    whois,
)
from tests.warm_start import cli_run

CAPABILITY = "example.com/cap/tailagent"
CONFIG = f"""
[access]
allowed_logins = ["alice@example.com"]
allowed_tags = ["tag:ci"]
capability = "{CAPABILITY}"
allowed_origins = ["https://dash.example.com"]
"""
FORGED = {"Tailscale-User-Login": OWNER, "Tailscale-User-Name": "Owner"}
needs_runuser = pytest.mark.skipif(
    shutil.which("runuser") is None or shutil.which("curl") is None or os.geteuid() != 0,
    reason="needs root with runuser and curl, to send a request as another Unix user",
)


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeTailscaled]:
    tailscaled = FakeTailscaled(tmp_path_factory.mktemp("tailscaled")).start()
    yield tailscaled
    tailscaled.stop()


@pytest.fixture(scope="module")
def tcp_server(
    tmp_path_factory: pytest.TempPathFactory, fake: FakeTailscaled
) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("access")
    config = tmp / "tailagent.toml"
    config.write_text(CONFIG)
    server = start_server(tmp, "--config", str(config), "--tailscale-socket", str(fake.socket))
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def reset(fake: FakeTailscaled) -> Iterator[None]:
    fake.peers, fake.down = {}, False
    fake.write()
    yield


def port_of(server: RunningServer) -> int:
    return int(urlsplit(server.url).port or 0)


def ask(server: RunningServer, text: str, **kwargs: object) -> tuple[int, dict[str, object]]:
    return request("127.0.0.1", port_of(server), body=send_message(text), **kwargs)  # type: ignore[arg-type]


# --- TCP loopback listener ---------------------------------------------------------------------


def test_serve_forwarded_owner_gets_in(tcp_server: RunningServer, fake: FakeTailscaled) -> None:
    fake.peers["100.64.0.9"] = whois(OWNER, ip="100.64.0.9")
    fake.write()
    status, body = ask(
        tcp_server, "owner", headers={"X-Forwarded-For": "100.64.0.9", "Host": NODE_DNS}
    )
    assert status == 200, body
    assert "user:owner@example.com (tailscale serve)" in tcp_server.last_access_line()


def test_serve_forwarded_stranger_is_refused_with_what_would_let_them_in(
    tcp_server: RunningServer, fake: FakeTailscaled
) -> None:
    fake.peers["100.64.0.10"] = whois("mallory@example.com", ip="100.64.0.10")
    fake.write()
    status, body = ask(tcp_server, "stranger", headers={"X-Forwarded-For": "100.64.0.10"})
    assert status == 403
    assert refusal(body)[0] == "forbidden"
    assert "mallory@example.com is not in access.allowed_logins" in refusal(body)[1]
    assert CAPABILITY in refusal(body)[1]


def test_netstack_connection_is_the_peer_whatever_headers_it_sends(
    tcp_server: RunningServer, fake: FakeTailscaled
) -> None:
    source = free_port()
    fake.peers[f"127.0.0.1:{source}"] = whois("alice@example.com", name="alice-laptop")
    fake.write()
    status, _ = ask(
        tcp_server,
        "netstack",
        source_port=source,
        headers={"X-Forwarded-For": "100.64.0.9", **FORGED},
    )
    assert status == 200
    line = tcp_server.last_access_line()
    assert "user:alice@example.com (tailnet connection)" in line


def test_a_raw_tcp_serve_entry_to_this_listener_voids_forwarded_identities(
    tmp_path: Path,
) -> None:
    """`tailscale serve --tcp` hands a peer's own bytes to the listener from tailscaled's
    socket and registers nothing for whois: the peer could write X-Forwarded-For."""
    fake = FakeTailscaled(tmp_path / "ts")
    fake.peers["100.64.0.9"] = whois(OWNER, ip="100.64.0.9")
    port = free_port()
    fake.serve = {"TCP": {"443": {"TCPForward": f"127.0.0.1:{port}"}}}
    fake.start()
    server = start_server(tmp_path, "--listen", f"127.0.0.1:{port}",
                          "--tailscale-socket", str(fake.socket))  # fmt: skip
    try:
        status, body = request("127.0.0.1", port, body=send_message("forged"),
                               headers={"X-Forwarded-For": "100.64.0.9"})  # fmt: skip
        assert status == 401, body
        line = server.last_access_line()
        assert "X-Forwarded-For ignored: serve forwards raw TCP here" in line
        assert "TCP entry forwards peers' raw bytes (127.0.0.1:" in server.log()
    finally:
        server.stop()
        fake.stop()


def test_on_a_tun_device_serves_connections_skip_the_futile_port_whois(tmp_path: Path) -> None:
    """Only userspace networking forwards peers' raw TCP to loopback (and registers it):
    on a TUN device tailscaled's loopback connections are serve's, whose ip:port whois
    could only miss, at ~180 ms each inside tailscaled. So it is not asked."""
    fake = FakeTailscaled(tmp_path / "ts", tun=True)
    source = free_port()
    # Were it asked, this registration would name alice; it is not asked.
    fake.peers[f"127.0.0.1:{source}"] = whois("alice@example.com", name="alice-laptop")
    fake.peers["100.64.0.9"] = whois(OWNER, ip="100.64.0.9")
    fake.start()
    server = start_server(tmp_path, "--tailscale-socket", str(fake.socket))
    try:
        forwarded = {"X-Forwarded-For": "100.64.0.9"}
        status, _ = request("127.0.0.1", port_of(server), body=send_message("tun"),
                            source_port=source, headers=forwarded)  # fmt: skip
        assert status == 200
        assert "user:owner@example.com (tailscale serve)" in server.last_access_line()
    finally:
        server.stop()
        fake.stop()


@needs_runuser
def test_local_non_root_process_forging_headers_is_refused(
    tcp_server: RunningServer, fake: FakeTailscaled
) -> None:
    fake.peers["100.64.0.9"] = whois(OWNER, ip="100.64.0.9")
    fake.write()
    result = curl_as_nobody(
        tcp_server.url + "/",
        body=send_message("forged"),
        headers={"X-Forwarded-For": "100.64.0.9", **FORGED},
    )
    assert result.stdout == "401", result
    line = tcp_server.last_access_line()
    assert "X-Forwarded-For ignored" in line and "uid 65534" in line


def test_local_process_with_a_token_gets_in_as_the_token(tcp_server: RunningServer) -> None:
    status, _ = ask(tcp_server, "token", headers={"Authorization": f"Bearer {tcp_server.token}"})
    assert status == 200
    assert "token:local (bearer token" in tcp_server.last_access_line()


def test_local_process_without_token_is_401_with_bearer_challenge(
    tcp_server: RunningServer,
) -> None:
    status, body = ask(tcp_server, "anonymous")
    assert status == 401
    assert refusal(body)[0] == "unauthorized"
    assert "need a bearer token" in refusal(body)[1]


def test_wrong_token_is_401_and_never_echoed(tcp_server: RunningServer) -> None:
    status, body = ask(tcp_server, "badtoken", headers={"Authorization": "Bearer ta_nope-secret"})
    assert status == 401
    assert "ta_nope-secret" not in str(body)


def test_browser_origin_is_refused_unless_allowed(tcp_server: RunningServer) -> None:
    auth = {"Authorization": f"Bearer {tcp_server.token}"}
    status, body = ask(tcp_server, "origin", headers={**auth, "Origin": "https://evil.example"})
    assert status == 403 and "access.allowed_origins" in refusal(body)[1]
    status, _ = ask(tcp_server, "origin-ok", headers={**auth, "Origin": "https://dash.example.com"})
    assert status == 200


def test_funnel_request_is_refused(tcp_server: RunningServer, fake: FakeTailscaled) -> None:
    fake.peers["100.64.0.9"] = whois(OWNER, ip="100.64.0.9")
    fake.write()
    status, body = ask(
        tcp_server,
        "funnel",
        headers={"X-Forwarded-For": "100.64.0.9", "Tailscale-Funnel-Request": "?1"},
    )
    assert status == 403 and "Funnel" in refusal(body)[1]


def test_a_foreign_host_name_is_refused(tcp_server: RunningServer) -> None:
    auth = {"Authorization": f"Bearer {tcp_server.token}"}
    status, body = ask(tcp_server, "rebind", headers={**auth, "Host": "evil.example:3008"})
    assert status == 403 and "does not name this server" in refusal(body)[1]
    for good in (NODE_DNS, "100.64.0.1", "localhost:1234"):
        assert ask(tcp_server, f"host-{good}", headers={**auth, "Host": good})[0] == 200


def test_tailscaled_down_fails_closed(tcp_server: RunningServer, fake: FakeTailscaled) -> None:
    fake.down = True
    fake.write()
    status, body = ask(tcp_server, "down", headers={"X-Forwarded-For": "100.64.0.9"})
    assert status == 503
    assert refusal(body)[0] == "identity unavailable"
    # A token still works: nothing but a local process can reach us while it is down.
    auth = {"Authorization": f"Bearer {tcp_server.token}"}
    assert ask(tcp_server, "down-token", headers=auth)[0] == 200


def test_no_credentials_while_tailscaled_is_down_is_a_401_that_says_what_works(
    tcp_server: RunningServer, fake: FakeTailscaled
) -> None:
    """A request that claims no tailnet identity is simply local: it needs a token."""
    fake.down = True
    fake.write()
    port = port_of(tcp_server)
    body = {"jsonrpc": "2.0", "id": 7, "method": "ListTasks", "params": {}}
    with httpx.Client(timeout=10) as http:
        rpc = http.post(f"http://127.0.0.1:{port}/", json=body, headers={"A2A-Version": "1.0"})
        rest = http.get(f"http://127.0.0.1:{port}/tasks", headers={"A2A-Version": "1.0"})
    assert rpc.status_code == 401 and rpc.headers["WWW-Authenticate"] == "Bearer"
    error = rpc.json()["error"]
    assert rpc.json()["jsonrpc"] == "2.0" and error["code"] == -32600
    assert "bearer token" in error["message"] and "for tailnet callers" in error["message"]
    assert "start tailscaled at " in error["message"]
    assert rest.status_code == 401 and rest.json()["error"]["status"] == "UNAUTHENTICATED"
    result = cli_run(
        [sys.executable, "-m", "tailagent", "call", "hi", "--url", f"http://127.0.0.1:{port}",
         "--state-dir", "/nonexistent"], capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode != 0
    assert "bearer token" in result.stderr, result.stderr


def test_tagged_node_is_its_tags_not_the_placeholder_login(
    tcp_server: RunningServer, fake: FakeTailscaled
) -> None:
    fake.peers["100.64.0.20"] = whois(tags=("tag:ci",), name="runner", ip="100.64.0.20")
    fake.peers["100.64.0.21"] = whois(tags=("tag:other",), name="box", ip="100.64.0.21")
    fake.write()
    status, _ = ask(tcp_server, "tagged", headers={"X-Forwarded-For": "100.64.0.20"})
    assert status == 200
    line = tcp_server.last_access_line()
    assert "tags:tag:ci" in line and "tagged-devices" not in line
    status, body = ask(tcp_server, "tagged-no", headers={"X-Forwarded-For": "100.64.0.21"})
    assert status == 403 and "access.allowed_tags" in refusal(body)[1]


def test_a_grant_gives_its_role(tcp_server: RunningServer, fake: FakeTailscaled) -> None:
    caps = {CAPABILITY: [{"role": "approver"}]}
    fake.peers["100.64.0.30"] = whois("carol@example.com", caps=caps, ip="100.64.0.30")
    fake.peers["100.64.0.31"] = whois(
        "dave@example.com", caps={"other.com/cap/x": [{"role": "admin"}]}, ip="100.64.0.31"
    )
    fake.write()
    assert ask(tcp_server, "granted", headers={"X-Forwarded-For": "100.64.0.30"})[0] == 200
    assert ask(tcp_server, "other-cap", headers={"X-Forwarded-For": "100.64.0.31"})[0] == 403


def test_public_routes_need_no_identity(tcp_server: RunningServer, fake: FakeTailscaled) -> None:
    fake.down = True
    fake.write()
    for path in ("/.well-known/agent-card.json", "/healthz"):
        status, _ = request("127.0.0.1", port_of(tcp_server), method="GET", path=path)
        assert status == 200, path


def test_malformed_forwarding_is_refused(tcp_server: RunningServer) -> None:
    status, body = ask(tcp_server, "xff2", headers={"X-Forwarded-For": "100.64.0.9, 100.64.0.10"})
    assert status == 401 and "exactly one address" in refusal(body)[1]


# --- unix socket listener ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def unix_server(fake: FakeTailscaled) -> Iterator[tuple[RunningServer, Path]]:
    # A world-traversable directory, so that only the socket's own mode keeps others out.
    base = Path(tempfile.mkdtemp(prefix="tailagent-unix-"))
    base.chmod(0o755)
    socket_path = base / "tailagent.sock"
    config = base / "tailagent.toml"
    config.write_text(CONFIG)
    server = start_server(
        base,
        "--config",
        str(config),
        "--tailscale-socket",
        str(fake.socket),
        listen=f"unix:{socket_path}",
    )
    yield server, socket_path
    server.stop()
    shutil.rmtree(base, ignore_errors=True)


def unix_request(
    socket_path: Path, text: str, headers: dict[str, str]
) -> tuple[int, dict[str, object]]:
    """A SendMessage over the unix socket, its answer read even when the server answered
    and closed before the whole request was written (a refusal, `Connection: close`):
    http.client raised BrokenPipeError there and lost the answer the server had sent."""
    import http.client
    import json
    import socket as socket_module

    body = json.dumps(send_message(text)).encode()
    fields = {"Host": "localhost", "Content-Type": "application/json", "A2A-Version": "1.0",
              "Content-Length": str(len(body)), **headers}  # fmt: skip
    head = "POST / HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    with socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(socket_path))
        # A write cut short means the server has answered already: read it.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(head.encode() + b"\r\n" + body)
        response = http.client.HTTPResponse(sock)
        response.begin()
        data = response.read()
    return response.status, json.loads(data)


def test_unix_forwarded_request_is_the_peer(unix_server, fake: FakeTailscaled) -> None:  # type: ignore[no-untyped-def]
    server, socket_path = unix_server
    fake.peers["100.64.0.40"] = whois("alice@example.com", ip="100.64.0.40")
    fake.write()
    status, _ = unix_request(socket_path, "unix-peer", {"X-Forwarded-For": "100.64.0.40", **FORGED})
    assert status == 200
    assert "user:alice@example.com (tailscale serve (unix socket))" in server.last_access_line()


def test_unix_local_caller_needs_a_token(unix_server) -> None:  # type: ignore[no-untyped-def]
    server, socket_path = unix_server
    assert unix_request(socket_path, "unix-anon", {})[0] == 401
    assert (
        unix_request(socket_path, "unix-token", {"Authorization": f"Bearer {server.token}"})[0]
        == 200
    )


@needs_runuser
def test_other_users_cannot_connect_to_the_unix_socket(unix_server) -> None:  # type: ignore[no-untyped-def]
    _, socket_path = unix_server
    assert stat.S_IMODE(socket_path.stat().st_mode) == 0o600
    result = curl_as_nobody(
        "http://localhost/", body=send_message("x"), headers=FORGED, unix_socket=socket_path
    )
    assert result.returncode == 7 and result.stdout == "000"  # curl: could not connect


def test_tailscaled_gone_fails_closed(tmp_path: Path) -> None:
    tailscaled = FakeTailscaled(tmp_path / "tailscaled").start()
    server = start_server(tmp_path, "--tailscale-socket", str(tailscaled.socket))
    try:
        tailscaled.stop()
        status, body = ask(server, "gone", headers={"X-Forwarded-For": "100.64.0.9"})
        assert status == 503
        assert "not reachable" in refusal(body)[1]
        assert "identity unavailable" in server.log()
    finally:
        assert server.stop() == 0


def test_local_without_token_is_an_explicit_opt_in(tmp_path: Path) -> None:
    config = tmp_path / "open.toml"
    config.write_text("[access]\nlocal_without_token = true\n")
    missing = tmp_path / "no-tailscaled.sock"
    server = start_server(tmp_path, "--config", str(config), "--tailscale-socket", str(missing))
    try:
        assert ask(server, "open")[0] == 200
        assert "local:local" in server.last_access_line()
    finally:
        assert server.stop() == 0


def test_require_token_demands_both(tmp_path: Path) -> None:
    tailscaled = FakeTailscaled(tmp_path / "tailscaled").start()
    tailscaled.peers["100.64.0.50"] = whois("alice@example.com", ip="100.64.0.50")
    tailscaled.write()
    config = tmp_path / "strict.toml"
    config.write_text('[access]\nallowed_logins = ["alice@example.com"]\nrequire_token = true\n')
    server = start_server(
        tmp_path, "--config", str(config), "--tailscale-socket", str(tailscaled.socket)
    )
    try:
        forwarded = {"X-Forwarded-For": "100.64.0.50"}
        status, body = ask(server, "no-token", headers=forwarded)
        assert status == 401 and "access.require_token" in refusal(body)[1]
        auth = {"Authorization": f"Bearer {server.token}"}
        assert ask(server, "both", headers={**forwarded, **auth})[0] == 200
        assert "user:alice@example.com" in server.last_access_line()
    finally:
        server.stop()
        tailscaled.stop()
