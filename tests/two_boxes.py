"""Two real tailagent servers on loopback playing devbox-1 (A) and devbox-2 (B) of one
tailnet, for the tests of handing work from one box to another.

Each has a fake tailscaled naming it; a forwarding proxy plays the tailnet between them,
as tailscaled's outbound HTTP proxy does, and tells B that a call comes from devbox-1
(tagged `tag:dev`), as B's `tailscale serve` would. B lets devbox-1 hand work in for
alice; what A lets in and asks before a hand-off is each test's.
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.conftest import RunningServer, start_server
from tests.tailnet import FakeTailscaled
from tests.tailnet_proxy import TailnetProxy

ALICE = "alice@example.com"
A_NODE, B_NODE = "devbox-1.tail.test", "devbox-2.tail.test"
A_IP = "100.64.0.9"  # devbox-1's address, as B's tailscaled names it


class NamedTailscaled(FakeTailscaled):
    """A fake tailscaled whose node is `dns_name`, with `peer_names` online."""

    dns_name: str = ""
    peer_names: tuple[str, ...] = ()

    def write(self) -> None:
        self.nodes = {
            f"nodekey:{n}": {"DNSName": n + ".", "Online": True, "UserID": 1, "Tags": ["tag:dev"]}
            for n in self.peer_names
        }
        super().write()
        state: dict[str, Any] = json.loads(self.config.read_text())
        state["status"]["Self"]["DNSName"] = self.dns_name + "."
        self.config.write_text(json.dumps(state))


def named(directory: Path, dns_name: str, peers: tuple[str, ...] = ()) -> NamedTailscaled:
    fake = NamedTailscaled(directory)
    fake.dns_name, fake.peer_names = dns_name, peers
    return fake


def port_of(server: RunningServer) -> int:
    return int(server.url.rsplit(":", 1)[1].rstrip("/"))


@dataclass
class Boxes:
    tmp: Path
    proxy: TailnetProxy
    a: RunningServer
    b: RunningServer
    a_args: list[str]
    b_args: list[str]
    fakes: list[FakeTailscaled] = field(default_factory=list)

    def restart_a(self, sig: int = signal.SIGTERM) -> None:
        self.a.stop(sig)
        self.a = start_server(self.tmp / "a", *self.a_args, state_dir=self.a.state_dir)
        self.proxy.routes[A_NODE] = port_of(self.a)

    def restart_b(self, sig: int = signal.SIGKILL) -> None:
        self.b.stop(sig)
        self.b = start_server(self.tmp / "b", *self.b_args, state_dir=self.b.state_dir)
        self.proxy.routes[B_NODE] = port_of(self.b)

    def stop(self) -> None:
        self.a.stop()
        self.b.stop()
        for fake in self.fakes:
            fake.stop()
        self.proxy.stop()


def start_boxes(
    tmp: Path,
    *,
    a_sections: str = "",
    a_delegation: str = "",
    a_callers: dict[str, dict[str, Any]] | None = None,
) -> Boxes:
    """A and B started. `a_sections` is A's configuration before its `[delegation]`
    section, `a_delegation` lines of that section; `a_callers` are the whois answers of
    A's tailscaled by address (a person's laptop or phone)."""
    proxy = TailnetProxy().start()
    fake_a = named(tmp / "ts-a", A_NODE, peers=(B_NODE,))
    fake_a.peers.update(a_callers or {})
    fake_a.start()
    fake_b = named(tmp / "ts-b", B_NODE)
    node_a = {"ID": 9, "Name": A_NODE + ".", "Addresses": [f"{A_IP}/32"], "Tags": ["tag:dev"]}
    profile = {"ID": 2, "LoginName": "tagged-devices", "DisplayName": "Tagged Devices"}
    fake_b.peers[A_IP] = {"Node": node_a, "UserProfile": profile, "CapMap": {}}
    fake_b.start()
    common = f'[delegation]\nproxy = "{proxy.url}"\nscheme = "http"\nport = 80\n'
    (tmp / "a.toml").write_text(f"{a_sections}{common}{a_delegation}")
    (tmp / "b.toml").write_text(
        f'[access]\nallowed_logins = ["{ALICE}"]\n{common}allowed_nodes = ["devbox-1"]\n'
    )
    a_args = ["--config", str(tmp / "a.toml"), "--public-url", f"http://{A_NODE}",
              "--tailscale-socket", str(fake_a.socket)]  # fmt: skip
    b_args = ["--config", str(tmp / "b.toml"), "--public-url", f"http://{B_NODE}",
              "--tailscale-socket", str(fake_b.socket)]  # fmt: skip
    a = start_server(tmp / "a", *a_args)
    b = start_server(tmp / "b", *b_args)
    proxy.routes.update({A_NODE: port_of(a), B_NODE: port_of(b)})
    proxy.forwarded_for[B_NODE] = A_IP
    return Boxes(tmp, proxy, a, b, a_args, b_args, [fake_a, fake_b])
