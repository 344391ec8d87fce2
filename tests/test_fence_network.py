"""Red team, the network (issue 54 section 1): an agent that knows this code, with the
default `sandbox.network = "on"`, tries to reach the server and the box directly, through
a real server.

Before issue 54 an agent in "on" shared the host's network: it connected to the server's
loopback port with `X-Forwarded-For`, was taken for `tailscale serve`, and answered its own
permission prompt as the owner. Now every agent has a network of its own and reaches the
internet through its own conversation's proxy: loopback, private, tailnet and this box's
addresses are refused unless named, and one agent cannot replace another's proxy or use up
its connections.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_isolation import make_project
from tests.test_sandbox import Box, OriginHandler, attempt, fetch, got_through, two_people

HOSTILE = Path(__file__).parent / "hostile_acp_agent.py"
BRIDGE = "127.0.0.1:3128"  # where each fence's own loopback reaches its proxy
HELD = 100  # connections Bob's agent tries to hold through its proxy


@pytest.fixture(scope="module")
def origin() -> Iterator[str]:
    """An HTTP origin on the box's loopback, named in allow_hosts by address and port (a
    name would not unlock it), as a local package mirror would be."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), OriginHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.2:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def ssh_server() -> Iterator[str]:
    """Something that greets as an SSH server does, on the box's loopback: enough for
    ssh to show it reached it (it then fails the key exchange, which is not the point)."""
    listener = socket.socket()
    listener.bind(("127.0.0.2", 0))
    listener.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.sendall(b"SSH-2.0-tailagent-test\r\n")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield f"127.0.0.2:{listener.getsockname()[1]}"
    listener.close()


@pytest.fixture(scope="module")
def git_origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A repository served over plain HTTP (git's dumb protocol) on the box's loopback."""
    import functools
    import http.server

    root = tmp_path_factory.mktemp("git-origin")
    subprocess.run(["git", "init", "-q", "--bare", str(root / "shared.git")], check=True)
    work = root / "work"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    (work / "README").write_text("cloned through the proxy\n")
    for args in (
        ["add", "README"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"],
        ["push", "-q", str(root / "shared.git"), "HEAD:main"],
    ):
        subprocess.run(["git", "-C", str(work), *args], check=True)  # fmt: skip
    subprocess.run(["git", "-C", str(root / "shared.git"), "update-server-info"], check=True)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"127.0.0.2:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def non_public(host: str, port: int) -> list[str]:
    """`host`'s addresses on this box that are not public, as allow_hosts names them: a
    registry this box reaches through a mirror (this workplace's) must be named so."""
    try:
        found = {i[4][0] for i in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
    except OSError:
        return []
    private = sorted(a for a in found if not ipaddress.ip_address(a).is_global)
    return [f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in private]


@pytest.fixture(scope="module")
def box(
    tmp_path_factory: pytest.TempPathFactory, origin: str, ssh_server: str, git_origin: str
) -> Iterator[Box]:
    tmp = tmp_path_factory.mktemp("fence-net")
    home = Path(tempfile.mkdtemp(prefix="tailagent-home-", dir="/var/tmp"))
    make_project(tmp / "workspace", {"calc.py": "def add(a, b):\n    return a + b\n"})
    config = tmp / "tailagent.toml"
    # network "on", the default; the box's own servers named by address and port.
    named = [origin, ssh_server, git_origin, *non_public("pypi.org", 443)]
    named += non_public("files.pythonhosted.org", 443)
    config.write_text(f"[sandbox]\nallow_hosts = {json.dumps(named)}\n")
    env = {**os.environ, "HOME": str(home)}
    serve = ("--agent-command", f"{sys.executable} {HOSTILE}", "--isolation", "worktree")
    with two_people(tmp, home, env, *serve, "--config", str(config)) as box:
        yield box


def socks_fetch(url: str) -> str:
    """curl through the fence's proxy spoken as SOCKS5, names resolved by the proxy (even
    for loopback, which NO_PROXY would send straight to the fence's own)."""
    return f"curl -sS --max-time 10 --noproxy '' --socks5-hostname {BRIDGE} {url}"


def proxied(url: str) -> str:
    """curl through the fence's proxy spoken as HTTP, even for loopback; a refusal fails."""
    return f"curl -sSf --max-time 10 --noproxy '' -x http://{BRIDGE} {url}"


def abstract_connect(name: str) -> str:
    return (
        'python3 -c "import socket; s = socket.socket(socket.AF_UNIX); '
        f"s.connect('\\0{name}'); print('connected')\""
    )


async def test_on_reaches_the_internet_only_through_its_own_proxy(
    box: Box, origin: str, abstract: str
) -> None:
    port = box.server.url.rsplit(":", 1)[1]
    forged = (
        f"curl -sS --noproxy '*' --max-time 5 -H 'X-Forwarded-For: 100.64.0.7' "
        f"-H 'Authorization: Bearer x' http://127.0.0.1:{port}/v1/tasks"
    )
    plan = {
        "connect": [f"127.0.0.1:{port}", f"::1:{port}"],
        "run": [
            forged,  # the server's port, directly: its loopback is not the box's
            proxied(f"http://127.0.0.1:{port}/healthz"),  # through the proxy: loopback refused
            proxied(f"http://localhost:{port}/healthz"),
            socks_fetch(f"http://127.0.0.1:{port}/healthz"),
            socks_fetch(f"http://localhost:{port}/healthz"),
            socks_fetch("http://100.100.100.100/"),  # tailscaled's quad-100
            fetch("http://100.100.100.100/"),
            abstract_connect(abstract),
            "rm -f /run/tailagent-proxy/proxy.sock",  # its proxy, which it cannot replace
            "touch /run/tailagent-proxy/planted",
            "echo '|/tmp/x' > /proc/sys/kernel/core_pattern",
            "echo 1 > /proc/sys/vm/overcommit_memory",
        ],
    }
    got, _ = await attempt(box.bob, plan)
    assert got_through(got) == {}, got
    assert "returned error: 403" in got[f"run {proxied(f'http://127.0.0.1:{port}/healthz')}"]
    assert "returned error: 403" in got[f"run {proxied(f'http://localhost:{port}/healthz')}"]
    for host in ("127.0.0.1", "localhost"):  # SOCKS's own "not allowed by the rules"
        said = got[f"run {socks_fetch(f'http://{host}:{port}/healthz')}"]
        assert said.endswith(f"Can't complete SOCKS5 connection to {host}. (2)"), said
    # Controls: what the proxy lets through, as HTTP and as SOCKS5.
    controls = {
        "run": [
            fetch(f"http://{origin}/"),
            socks_fetch(f"http://{origin}/"),
            "ls /run/tailagent-proxy",
        ]
    }
    worked, _ = await attempt(box.bob, controls)
    assert worked == {
        f"run {fetch(f'http://{origin}/')}": "ok: from the origin",
        f"run {socks_fetch(f'http://{origin}/')}": "ok: from the origin",
        "run ls /run/tailagent-proxy": "ok: proxy.sock",
    }
    with open("/proc/sys/kernel/core_pattern") as knob:  # noqa: ASYNC230 (a short read)
        assert knob.read().strip() != "|/tmp/x"


HOLDER = """
import json, socket, sys, time
held, said = [], {}
for _ in range(HELD):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
    s.sendall(b"CONNECT ORIGIN HTTP/1.1\\r\\n\\r\\n")
    status = s.recv(12).decode()[9:12]
    said[status] = said.get(status, 0) + 1
    held.append(s)
open("held.txt", "w").write(json.dumps(said) + "\\ndone\\n")
time.sleep(120)
"""


async def test_one_conversation_cannot_use_up_another_s_way_out(box: Box, origin: str) -> None:
    """Bob's agent holds every connection its proxy gives it (from a process left behind,
    past its turn); Alice's agent still gets out."""
    script = HOLDER.replace("HELD", str(HELD)).replace("ORIGIN", origin)
    hold = (
        f"python3 -c '{script}' </dev/null >/dev/null 2>&1 & "
        "for i in $(seq 100); do grep -q done held.txt 2>/dev/null && break; sleep 0.1; done; "
        "head -1 held.txt"
    )
    held, _ = await attempt(box.bob, {"run": [hold]})
    counts = json.loads(held[f"run {hold}"].removeprefix("ok: "))
    assert counts == {"200": 64, "503": HELD - 64}, held
    got, _ = await attempt(box.alice, {"run": [fetch(f"http://{origin}/")]})
    assert got == {f"run {fetch(f'http://{origin}/')}": "ok: from the origin"}


async def test_git_s_ssh_goes_through_the_proxy_as_socks5(box: Box, ssh_server: str) -> None:
    """ssh takes no proxy from the environment: the fence's GIT_SSH_COMMAND gives it one,
    and it reaches a named host, and no other."""
    host, port = ssh_server.split(":")
    # As git runs it: through a shell, its arguments after it.
    reached = (
        f'eval "$GIT_SSH_COMMAND -v -o BatchMode=yes -p {port} git@{host} true" 2>&1 '
        "| grep -c 'remote software version tailagent-test'"
    )
    refused = 'eval "$GIT_SSH_COMMAND -o BatchMode=yes git@127.0.0.1 true"'
    got, _ = await attempt(box.bob, {"run": [reached, refused]})
    assert got[f"run {reached}"] == "ok: 1", got
    said = got[f"run {refused}"]
    assert said.startswith("refused: exit 255 "), said
    assert "the fence's proxy refuses this host" in said


async def test_pip_and_git_clone_get_out_as_agents_use_them(box: Box, git_origin: str) -> None:
    """The default network keeps an agent's usual work going: `pip` from the package
    index and `git clone` over HTTP, each through the fence's proxy."""
    pip = f"{sys.executable} -m pip download -q --no-deps --no-cache-dir -d wheels six==1.16.0"
    clone = f"git clone -q -b main http://{git_origin}/shared.git copy && cat copy/README"
    got, _ = await attempt(box.bob, {"run": [pip, "ls wheels", clone]})
    assert got[f"run {pip}"].startswith("ok"), got
    assert got["run ls wheels"] == "ok: six-1.16.0-py2.py3-none-any.whl", got
    assert got[f"run {clone}"] == "ok: cloned through the proxy", got
