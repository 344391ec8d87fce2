"""A preset's npm package, installed by tailagent for fenced agents: once per version, by
npm in a fence of its own folder, and run from there by agents that cannot change it.

Uses the real npm registry (as .ci/run's own npm install does) with a small package that
has a program: semver.
"""

from __future__ import annotations

import ipaddress
import shutil
import socket
import subprocess
import tempfile
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tailagent.agents.acp.install import installed, program
from tailagent.config import SandboxSettings
from tailagent.sandbox import bwrap
from tailagent.sandbox.fences import Sandbox

PACKAGE, VERSION = "semver", "7.6.0"

pytestmark = pytest.mark.skipif(
    shutil.which("npm") is None or bwrap.find() is None,
    reason="needs npm (Node.js) and bubblewrap (.ci/run installs both)",
)


@pytest.fixture
async def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Sandbox]:
    # Not under /tmp, which every fence replaces with its own: a real home is elsewhere.
    home = Path(tempfile.mkdtemp(prefix="tailagent-home-", dir="/var/tmp"))
    monkeypatch.setenv("HOME", str(home))
    # npm goes out through the fence's proxy, which lets no name unlock a non-public
    # address: where the registry resolves to one (a mirror, this workplace's), name it.
    settings = SandboxSettings(allow_hosts=registry_addresses())
    sandbox = Sandbox(settings, agent="custom", state_dir=tmp_path / "state")
    await sandbox.start()
    yield sandbox
    shutil.rmtree(home, ignore_errors=True)


def registry_addresses() -> tuple[str, ...]:
    """The npm registry's addresses on this box that are not public, each on 443."""
    registry = urllib.parse.urlsplit(
        subprocess.run(["npm", "config", "get", "registry"], capture_output=True, text=True,
                       timeout=30).stdout.strip()
    )  # fmt: skip
    host, port = registry.hostname or "registry.npmjs.org", registry.port or 443
    found = {info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)}
    private = [a for a in sorted(found) if not ipaddress.ip_address(a).is_global]
    return tuple(f"[{a}]:{port}" if ":" in a else f"{a}:{port}" for a in private)


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


async def test_installed_once_and_run_read_only_inside_a_fence(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    def fence_for(where: Path):  # type: ignore[no-untyped-def]
        return sandbox.fence(where, network="on", home=False)

    folder = await installed(PACKAGE, VERSION, fence_for)
    assert folder == Path.home() / ".cache/tailagent/agents" / f"{PACKAGE}@{VERSION}"
    assert not list(folder.parent.glob("*.partial-*"))  # nothing left half-made
    assert not (folder / ".npm-cache").exists()
    stamp = (folder / ".installed").stat().st_mtime_ns
    assert await installed(PACKAGE, VERSION, fence_for) == folder  # not again
    assert (folder / ".installed").stat().st_mtime_ns == stamp

    conversation = tmp_path / "conversation"
    conversation.mkdir()
    sandbox.show(folder)  # as the ACP backend does with what it installed
    fence = sandbox.fence(conversation)
    ran = run(fence.wrap([str(program(folder, PACKAGE)), "1.2.3"]))
    assert ran.returncode == 0 and ran.stdout.strip() == "1.2.3", ran.stderr
    planted = run(
        fence.wrap(["sh", "-c", f"echo planted >> {folder}/node_modules/semver/bin/semver.js"])
    )
    assert planted.returncode != 0 and "Read-only file system" in planted.stderr
    assert "planted" not in (folder / "node_modules/semver/bin/semver.js").read_text()


async def test_an_install_that_fails_says_why_and_leaves_nothing(sandbox: Sandbox) -> None:
    from tailagent.agents.events import AgentStartError

    with pytest.raises(AgentStartError, match=r"could not install semver@0\.0\.0-nope"):
        await installed(PACKAGE, "0.0.0-nope", lambda w: sandbox.fence(w, network="on"))
    assert not list((Path.home() / ".cache/tailagent/agents").glob("*"))
