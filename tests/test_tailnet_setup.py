"""`tailagent serve --tailnet` against the fake tailscaled's serve config."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import httpx

from tests.conftest import start_server
from tests.tailnet import NODE_DNS, FakeTailscaled
from tests.warm_start import cli_run

OTHER = {
    "TCP": {"8443": {"HTTPS": True}},
    "Web": {f"{NODE_DNS}:8443": {"Handlers": {"/": {"Proxy": "http://127.0.0.1:5000"}}}},
}


def test_tailnet_adds_its_entry_and_removes_exactly_it_at_stop(tmp_path: Path) -> None:
    fake = FakeTailscaled(tmp_path / "ts", serve=OTHER, conflict_once=True).start()
    try:
        server = start_server(tmp_path, "--tailnet", "--tailscale-socket", str(fake.socket))
        served = fake.current_serve()
        ours = served["Web"][f"{NODE_DNS}:443"]["Handlers"]["/"]["Proxy"]
        assert ours == server.url  # written despite a concurrent change (ETag, then retry)
        assert served["TCP"]["443"] == {"HTTPS": True}
        assert served["Web"][f"{NODE_DNS}:8443"] == OTHER["Web"][f"{NODE_DNS}:8443"]
        card = httpx.get(server.url + "/.well-known/agent-card.json",
                         headers={"A2A-Version": "1.0"}).json()  # fmt: skip
        assert card["supportedInterfaces"][0]["url"] == f"https://{NODE_DNS}"
        assert server.stop(signal.SIGTERM) == 0
        assert fake.current_serve() == OTHER
    finally:
        fake.stop()


def test_without_operator_rights_it_says_the_one_command(tmp_path: Path) -> None:
    fake = FakeTailscaled(tmp_path / "ts", operator=False).start()
    try:
        result = cli_run(
            [sys.executable, "-m", "tailagent", "serve", "--agent", "echo", "--tailnet",
             "--listen", "127.0.0.1:0", "--state-dir", str(tmp_path / "state"),
             "--tailscale-socket", str(fake.socket)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert result.returncode == 1
        last = result.stderr.strip().splitlines()[-1]
        assert "sudo tailscale set --operator=" in last
        assert fake.current_serve() == {}
    finally:
        fake.stop()
