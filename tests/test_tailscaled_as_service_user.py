"""Issue 54's last item, on a real box: tailscaled run as the service user itself.

tailagent believes `X-Forwarded-For` on its TCP listener from a connection of root's
or of tailscaled's user (access/resolve.py). Here both tailscaled (Tailscale's own,
tests/real_tailnet.py) and the server run as `nobody`, the server behind tailscaled's
`tailscale serve`, with the hostile agent of tests/test_sandbox.py fenced as usual:

- a peer through serve is the peer whois names;
- the fenced agent cannot reach the listener, nor tailscaled, to forge a caller;
- another local user forging the header is a plain local process;
- a process of `nobody` itself is taken for serve, on the TCP listener and on a
  unix-socket one alike: what `serve`'s start log and `tailagent doctor` say, in the
  same words, with the fix (tailscaled as root, or as a user of its own).
"""

from __future__ import annotations

import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.a2a_helpers import A2A
from tests.conftest import RunningServer, start_server
from tests.real_tailnet import Node, Tailnet, module_tailnet
from tests.test_isolation import make_project
from tests.test_real_tailnet import send
from tests.test_sandbox import HOSTILE, attempt, got_through
from tests.test_sandbox_nobody import (
    PATH,
    PYTHON,
    USER,
    add_token,
    as_service,
    give,
    server_pid,
    stop,
    why_not,
)

THIRD = "daemon"  # a local user that is neither the service's nor tailscaled's
LIST_TASKS = '{"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}'
ENV = {"PATH": PATH, "LANG": "C.UTF-8"}


@dataclass
class Box:
    """The agent's box: its tailscaled (nobody's), the server (nobody's) behind serve."""

    node: Node
    laptop: Node
    login: str  # the laptop's, as box's tailscaled names it
    server: RunningServer
    base: Path  # nobody's tree under /var/tmp: home, config, workspace, state dirs
    bob: A2A

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def config(self) -> Path:
        return self.base / "tailagent.toml"

    @property
    def port(self) -> str:
        return self.server.url.rsplit(":", 1)[1]

    def said_for(self, login: str) -> int:
        """Access lines of requests taken for `login`."""
        return sum(f"user:{login} " in line for line in self.server.log().splitlines())


@pytest.fixture(scope="module")
def tailnet() -> Iterator[Tailnet]:
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    yield from module_tailnet({"box": {"user": USER}, "laptop": {"proxy": True}})


@pytest.fixture(scope="module")
def box(tailnet: Tailnet) -> Iterator[Box]:
    node, laptop = tailnet.nodes["box"], tailnet.nodes["laptop"]
    nobody = pwd.getpwnam(USER)
    assert Path(f"/proc/{node.process.pid}").stat().st_uid == nobody.pw_uid
    assert node.socket.stat().st_uid == nobody.pw_uid
    login = node.whois(laptop.ip())["UserProfile"]["LoginName"]
    base = Path(tempfile.mkdtemp(prefix="tailagent-ts-nobody-", dir="/var/tmp"))
    try:
        base.chmod(0o755)  # mkdtemp's is 0700: nobody could not reach what is inside
        (base / "tailagent.toml").write_text(f'[access]\nallowed_logins = ["{login}"]\n')
        (base / "home").mkdir()
        make_project(base / "workspace", {"calc.py": "def add(a, b):\n    return a + b\n"})
        for top in ("home", "workspace", "tailagent.toml"):
            give(base / top, nobody)
        server, pid = as_nobody(base, node, "state", "--agent-command", f"{PYTHON} {HOSTILE}")
        try:
            bob = A2A(server.url, add_token(base / "home", server.state_dir, ENV, "bob"))
            node.tailscale("serve", "--bg", "--http=80", server.url)
            yield Box(node, laptop, login, server, base, bob)
        finally:
            node.tailscale("serve", "--http=80", "off", check=False)
            stop(server, pid)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def as_nobody(
    base: Path, node: Node, state: str, *extra: str, listen: str = "127.0.0.1:0"
) -> tuple[RunningServer, int]:
    """`tailagent serve` run by nobody on `base`'s home, config and workspace, asking
    `node`'s tailscaled; the server and its own pid (nobody's, under root's runuser)."""
    state_dir = base / state
    state_dir.mkdir(mode=0o700)
    give(state_dir, pwd.getpwnam(USER))
    server = start_server(
        base, "--config", str(base / "tailagent.toml"), "--tailscale-socket", str(node.socket),
        *extra, state_dir=state_dir, listen=listen, env=ENV,
        command=[*as_service(base / "home"), "-m", "tailagent"],
    )  # fmt: skip
    pid = server_pid(server.process.pid)
    if Path(f"/proc/{pid}").stat().st_uid != pwd.getpwnam(USER).pw_uid:
        stop(server, pid)
        raise AssertionError(f"the server ({pid}) is not {USER}'s")
    return server, pid


def forged_by(user: str, ip: str, url: str, *curl: str) -> str:
    """ListTasks sent to `url` by a process of `user`, naming `ip` in X-Forwarded-For
    (and no token); the status code."""
    done = subprocess.run(
        ["runuser", "-u", user, "--", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
         "-H", "Content-Type: application/json", "-H", "A2A-Version: 1.0",
         "-H", f"X-Forwarded-For: {ip}", "-d", LIST_TASKS, *curl, url],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return done.stdout


def test_a_request_through_serve_is_the_laptop_as_whois_says(box: Box) -> None:
    """tailscaled (nobody's) reaches the listener for `tailscale serve`: the caller is
    the peer it names, let in by access.allowed_logins."""
    response = send(box.laptop, f"http://{box.node.dns_name}/", "hello from the laptop")
    assert response.status_code == 200, response.text
    assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert f"user:{box.login} (tailscale serve)" in box.server.last_access_line()


async def test_the_fenced_agent_cannot_forge_the_laptop(box: Box) -> None:
    """The hostile agent runs as nobody, as tailscaled does, yet reaches neither the
    listener (its network is its own), nor loopback through its proxy, nor tailscaled's
    LocalAPI socket (hidden from the fence)."""
    ip = box.laptop.ip()
    forged = (
        f"curl -sS --noproxy '*' --max-time 5 -H 'X-Forwarded-For: {ip}' "
        f"-H 'Content-Type: application/json' -d '{LIST_TASKS}' http://127.0.0.1:{box.port}/"
    )
    proxied = (
        f"curl -sSf --max-time 10 --noproxy '' -x http://127.0.0.1:3128 "
        f"-H 'X-Forwarded-For: {ip}' -H 'Content-Type: application/json' -d '{LIST_TASKS}' "
        f"http://127.0.0.1:{box.port}/"
    )
    plan = {"connect": [f"127.0.0.1:{box.port}", str(box.node.socket)], "run": [forged, proxied]}
    before = box.said_for(box.login)
    got, turn = await attempt(box.bob, plan)
    assert turn.final_state == "completed"
    assert got_through(got) == {}, got
    assert got[f"run {forged}"].startswith("refused: exit 7 "), got  # curl: cannot connect
    assert got[f"run {proxied}"].endswith("error: 403"), got  # the proxy refuses loopback
    assert box.said_for(box.login) == before


def test_another_local_user_forging_is_a_local_process(box: Box) -> None:
    """A process of a user that is neither tailscaled's nor the server's names the
    laptop in vain: it is a local process without a token."""
    before = box.said_for(box.login)
    url = f"http://127.0.0.1:{box.port}/"
    assert forged_by(THIRD, box.laptop.ip(), url) == "401"
    said = box.server.last_access_line()
    uid = pwd.getpwnam(THIRD).pw_uid
    assert f"local process (uid {uid}), X-Forwarded-For ignored" in said, said
    assert box.said_for(box.login) == before


def test_a_process_of_the_service_user_is_taken_for_serve(box: Box) -> None:
    """The limit the start log and doctor name: tailscaled's user is the server's, so a
    process of it outside the fence is indistinguishable from `tailscale serve`."""
    assert forged_by(USER, box.laptop.ip(), f"http://127.0.0.1:{box.port}/") == "200"
    assert f"user:{box.login} (tailscale serve)" in box.server.last_access_line()


def test_a_unix_socket_listener_is_no_way_out_here(box: Box) -> None:
    """tailscaled reaches a unix-socket listener of the server's user because it is that
    user, and so does every other process of it: there too a forgery is believed, and
    the start log says so."""
    folder = Path(tempfile.mkdtemp(prefix="ta-", dir="/tmp"))  # a socket path is short
    give(folder, pwd.getpwnam(USER))
    socket_path = folder / "s.sock"
    server, pid = as_nobody(box.base, box.node, "unix-state", listen=f"unix:{socket_path}")
    try:
        box.node.tailscale("serve", "--bg", "--http=81", f"unix:{socket_path}")
        response = send(box.laptop, f"http://{box.node.dns_name}:81/", "over a unix socket")
        assert response.status_code == 200, response.text
        how = f"user:{box.login} (tailscale serve (unix socket))"
        assert how in server.last_access_line()
        forged = forged_by(USER, box.laptop.ip(), "http://localhost/", "--unix-socket",
                           str(socket_path))  # fmt: skip
        assert forged == "200"
        assert how in server.last_access_line()
        assert forged_by(THIRD, box.laptop.ip(), "http://localhost/", "--unix-socket",
                         str(socket_path)) == "000"  # fmt: skip
        assert "a unix-socket listener does not help here" in server.log()
    finally:
        box.node.tailscale("serve", "--http=81", "off", check=False)
        stop(server, pid)
        shutil.rmtree(folder, ignore_errors=True)


def test_serve_and_doctor_say_what_that_means_in_one_line(box: Box) -> None:
    """`tailagent doctor`, run as the service user on the server's state dir and
    tailscaled's socket, and the server's start log say the same, with the fix."""
    doctor = subprocess.run(
        [*as_service(box.home), "-m", "tailagent", "doctor", "--config", str(box.config),
         "--state-dir", str(box.server.state_dir), "--tailscale-socket", str(box.node.socket),
         "--listen", box.server.url.removeprefix("http://")],
        capture_output=True, text=True, timeout=60, env=ENV,
    )  # fmt: skip
    [line] = [x for x in doctor.stdout.splitlines() if "forwarded-for:" in x]
    detail, fix = line.removeprefix("✓ forwarded-for: ").split(" — fix: ")
    assert detail.startswith(f"tailscaled runs as this server's own user ({USER}): any ")
    assert f"any process of {USER} reaching the listener" in detail
    assert fix.startswith("run tailscaled as root, as its package does, or as a user of its own")
    logged = [x for x in box.server.log().splitlines() if "X-Forwarded-For: tailscaled" in x]
    assert len(logged) == 1, logged
    assert logged[0].endswith(f"X-Forwarded-For: {detail}; fix: {fix}"), logged
