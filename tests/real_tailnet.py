"""A real tailnet on this machine, for the tests: Tailscale's own tailscaled and
tailscale, built from source at a pinned release, and a control server of ours
(tests/tailnet_control, built on tailscale.com's testcontrol with an embedded
DERP relay and STUN server). Every address is on 127.0.0.1.

Builds are cached in .cache/tailnet (and Go's own caches), so only the first run
pays the few minutes of a cold build. Every process started here is stopped by
its PID; tailscaled also exits if this process dies (TS_PARENT_DEATH_FD), and
the control server when its stdin closes.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.build_lock import building
from tests.tailnet import free_port

RELEASE = "v1.102.5"
ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / ".cache" / "tailnet" / RELEASE
CONTROL_SOURCE = Path(__file__).resolve().parent / "tailnet_control"
# Features that would reach the Internet (captive-portal checks, ACME, port mapping):
# left out of the build, so a test tailnet stays on this machine.
HERMETIC_TAGS = (
    "ts_omit_captiveportal,ts_omit_acme,ts_omit_portmapper,ts_omit_cloud,ts_omit_clientupdate"
)
DOMAIN = "tail.test"


class Unavailable(Exception):
    """The real tailnet cannot be had here; str() is the reason a skip states."""


def build() -> Path:
    """The binaries, built once per release (a warm rebuild is a few seconds)."""
    go = shutil.which("go")
    if go is None:
        raise Unavailable("Go is not installed, so Tailscale cannot be built from source")
    with building(BIN.parent / f"{RELEASE}.lock"):
        return _build(go)


def _build(go: str) -> Path:
    """Under the build lock: another worker may have built them while this one waited.
    The control server is built again whenever a file of its source is newer."""
    wanted = [BIN / "tailscaled", BIN / "tailscale", BIN / "tailnet-control"]
    if all(p.exists() for p in wanted) and _control_current():
        return BIN
    BIN.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(BIN), "GOFLAGS": "-mod=mod"}
    steps = [
        ([go, "install", "-tags", HERMETIC_TAGS, f"tailscale.com/cmd/tailscaled@{RELEASE}",
          f"tailscale.com/cmd/tailscale@{RELEASE}"], ROOT),
        ([go, "build", "-o", str(BIN / "tailnet-control"), "."], CONTROL_SOURCE),
    ]  # fmt: skip
    for argv, cwd in steps:
        result = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200
        )
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["no output"])[-1]
            raise Unavailable(f"building Tailscale {RELEASE} failed: {last}")
    return BIN


def _control_current() -> bool:
    built = (BIN / "tailnet-control").stat().st_mtime
    return all(source.stat().st_mtime <= built for source in CONTROL_SOURCE.iterdir())


@dataclass
class Node:
    name: str
    directory: Path
    process: subprocess.Popen[bytes]
    death_pipe: int
    proxy_port: int | None = None

    @property
    def socket(self) -> Path:
        return self.directory / "ts.sock"

    @property
    def proxy(self) -> str:
        assert self.proxy_port is not None
        return f"http://127.0.0.1:{self.proxy_port}"

    @property
    def dns_name(self) -> str:
        return f"{self.name}.{DOMAIN}"

    def tailscale(self, *args: str, check: bool = True) -> str:
        result = subprocess.run(
            [str(BIN / "tailscale"), f"--socket={self.socket}", *args],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if check and result.returncode != 0:
            raise RuntimeError(f"tailscale {' '.join(args)}: {result.stdout}{result.stderr}")
        return result.stdout

    def ip(self) -> str:
        return self.tailscale("ip", "-4").strip()

    def whois(self, addr: str) -> dict[str, Any]:
        return json.loads(self.tailscale("whois", "--json", addr))


@dataclass
class Tailnet:
    tags: tuple[str, ...] = ("tag:ci",)
    require_authkey: str = ""  # when set, nodes must join with this key
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tn-")))
    url: str = ""
    nodes: dict[str, Node] = field(default_factory=dict)
    control: subprocess.Popen[str] | None = None

    def start(self) -> Tailnet:
        args = [str(BIN / "tailnet-control"), "-exit-on-stdin-eof", "-magicdns-domain", DOMAIN]
        if self.tags:
            args += ["-tags", ",".join(self.tags)]
        if self.require_authkey:
            args += ["-require-authkey", self.require_authkey]
        log = (self.directory / "control.log").open("w")
        self.control = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True
        )
        assert self.control.stdout is not None
        self.url = self.control.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.stop()
            raise RuntimeError(f"the control server did not start:\n{self.log('control.log')}")
        return self

    def node_env(self) -> dict[str, str]:
        """For a process that embeds a node: stray requests to Tailscale's hosts go to the
        control server's trap (nothing leaves the machine), loopback stays direct."""
        return {
            "HTTP_PROXY": self.url, "HTTPS_PROXY": self.url, "NO_PROXY": "127.0.0.1,localhost",
            "TS_NO_LOGS_NO_SUPPORT": "true",
        }  # fmt: skip

    def log(self, name: str) -> str:
        path = self.directory / name
        return path.read_text()[-3000:] if path.exists() else ""

    def add_node(
        self, name: str, *, proxy: bool = False, tags: tuple[str, ...] = (), user: str = ""
    ) -> Node:
        """A node joined to the tailnet; its tailscaled runs as `user` when one is named
        (as a box whose tailscaled is the service user's own runs it), else as this
        process's user."""
        directory = self.directory / name
        directory.mkdir()
        read_end, write_end = os.pipe()  # tailscaled exits when the write end closes
        env = {
            **os.environ,
            "TS_PARENT_DEATH_FD": str(read_end),
            "TS_ASSUME_NETWORK_UP_FOR_TEST": "1",
            "TS_DISABLE_PORTMAPPER": "1",
            "TS_PANIC_IF_HIT_MAIN_CONTROL": "1",
            "TS_DEBUG_OMIT_LOCAL_ADDRS": "1",
            "TS_CERT_SHARE_MODE": "ro",
            "TS_NETCHECK_GENERATE_204_URL": self.url + "/generate_204",
            "TS_LOGS_DIR": str(directory),
            "HTTP_PROXY": self.url,
            "HTTPS_PROXY": self.url,
        }
        args = [str(BIN / "tailscaled"), "--tun=userspace-networking", f"--statedir={directory}",
                f"--socket={directory}/ts.sock", "--port=0", "--no-logs-no-support",
                "--encrypt-state=false"]  # fmt: skip
        as_user: dict[str, Any] = {}
        if user:
            env["HOME"] = str(directory)  # this process's HOME may be closed to the user
            account = self._give(directory, user)
            as_user = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
        port = None
        if proxy:
            port = free_port()
            args.append(f"--outbound-http-proxy-listen=127.0.0.1:{port}")
        log = (directory / "tailscaled.log").open("w")
        process = subprocess.Popen(
            args, env=env, pass_fds=(read_end,), stdout=log, stderr=subprocess.STDOUT, **as_user
        )
        os.close(read_end)
        node = Node(name, directory, process, write_end, port)
        self.nodes[name] = node
        deadline = time.monotonic() + 30
        while "BackendState" not in node.tailscale("status", "--json", check=False):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"tailscaled {name} did not come up:\n{self.log(f'{name}/tailscaled.log')}"
                )
            time.sleep(0.05)
        key = self.require_authkey or "tskey-test"
        up = ["up", f"--login-server={self.url}", f"--authkey={key}", f"--hostname={name}",
              "--accept-dns=false"]  # fmt: skip
        if tags:
            up.append("--advertise-tags=" + ",".join(tags))
        node.tailscale(*up)
        return node

    def _give(self, directory: Path, user: str) -> pwd.struct_passwd:
        """The node's directory becomes the user's, and the tailnet's (mkdtemp's, 0700)
        one it may pass through to reach it."""
        account = pwd.getpwnam(user)
        self.directory.chmod(0o711)
        os.chown(directory, account.pw_uid, account.pw_gid)
        return account

    def grant(self, caps: dict[str, Any]) -> None:
        """Tailnet grants (app capabilities) every peer's whois carries from now on.

        Returns once every node has the new netmap: a node that takes it in the middle
        of a later test reconfigures its netstack then, and has been seen to cut a
        stream in flight."""
        request = urllib.request.Request(
            self.url + "/testctl/appcaps", data=json.dumps(caps).encode(), method="PUT"
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
        nodes = list(self.nodes.values())
        deadline = time.monotonic() + 20
        for node, peer in zip(nodes, nodes[1:] + nodes[:1], strict=True):
            while (seen := self._granted(node, peer)) != caps:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{node.name} did not get the new grants in 20 s: {seen}")
                time.sleep(0.1)

    @staticmethod
    def _granted(node: Node, peer: Node) -> dict[str, Any]:
        """The grants `node` sees for `peer`, without Tailscale's own capabilities."""
        capabilities = node.whois(peer.ip()).get("CapMap") or {}
        return {k: v for k, v in capabilities.items() if not k.startswith("https://tailscale.com/")}

    def stop(self) -> None:
        for node in self.nodes.values():
            node.process.terminate()
        for node in self.nodes.values():
            try:
                node.process.wait(10)
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait()
            os.close(node.death_pipe)
        self.nodes.clear()
        if self.control is not None:
            self.control.terminate()
            try:
                self.control.wait(10)
            except subprocess.TimeoutExpired:
                self.control.kill()
                self.control.wait()
            self.control = None
        shutil.rmtree(self.directory, ignore_errors=True)


def module_tailnet(nodes: dict[str, dict[str, Any]], **options: Any) -> Iterator[Tailnet]:
    """The body of a module fixture: a started tailnet with these nodes (name -> the
    options of add_node), stopped after; skipped, saying why, where it cannot be built."""
    import pytest

    try:
        build()
    except Unavailable as exc:
        pytest.skip(str(exc))
    net = Tailnet(**options).start()
    try:
        for name, node_options in nodes.items():
            net.add_node(name, **node_options)
        yield net
    finally:
        net.stop()


if __name__ == "__main__":
    # .ci/run builds here first, so the build's time and any failure show on their own.
    started = time.monotonic()
    try:
        print(f"tailnet binaries ready in {build()} ({time.monotonic() - started:.0f} s)")
    except Unavailable as exc:
        print(f"the real-tailnet tests will be skipped: {exc}")
