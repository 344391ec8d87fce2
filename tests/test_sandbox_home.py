"""The home as a fenced agent sees it, made by the real Sandbox and run in real bubblewrap:
its login file written only when nothing else logs it in, its settings the person's and
fixed, the rest of its state a private copy per conversation."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailagent.config import SandboxSettings
from tailagent.sandbox import bwrap
from tailagent.sandbox.fences import Sandbox

pytestmark = pytest.mark.skipif(
    bwrap.find() is None, reason="needs bubblewrap (.ci/run installs it)"
)


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    # Not under /tmp, which every fence replaces with its own: a real home is elsewhere.
    made = Path(tempfile.mkdtemp(prefix="tailagent-home-", dir="/var/tmp"))
    (made / ".claude").mkdir()
    (made / ".claude" / ".credentials.json").write_text('{"token": "the owner\'s"}')
    (made / ".claude" / "settings.json").write_text('{"permissions": {}}')
    monkeypatch.setenv("HOME", str(made))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    yield made
    shutil.rmtree(made, ignore_errors=True)


async def fenced(tmp_path: Path, name: str, line: str) -> subprocess.CompletedProcess[str]:
    sandbox = Sandbox(SandboxSettings(), agent="claude", state_dir=tmp_path / "state")
    await sandbox.start()
    directory = tmp_path / name
    directory.mkdir(exist_ok=True)
    return run(sandbox.fence(directory).wrap(["sh", "-c", line]))


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30)


async def test_the_login_is_written_only_when_nothing_else_logs_the_agent_in(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    login = home / ".claude" / ".credentials.json"
    refreshed = await fenced(tmp_path, "a", f'echo \'{{"token": "refreshed"}}\' > {login}')
    assert refreshed.returncode == 0, refreshed.stderr
    assert login.read_text().strip() == '{"token": "refreshed"}'  # the next conversation's
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    swapped = await fenced(tmp_path, "b", f'echo \'{{"token": "another account"}}\' > {login}')
    assert swapped.returncode != 0 and "Read-only file system" in swapped.stderr
    assert "another account" not in login.read_text()


async def test_settings_are_fixed_and_the_rest_is_a_private_copy(
    home: Path, tmp_path: Path
) -> None:
    settings = home / ".claude" / "settings.json"
    fixed = await fenced(tmp_path, "a", f"echo '{{\"hooks\": 1}}' > {settings}")
    assert fixed.returncode != 0 and settings.read_text() == '{"permissions": {}}'
    wrote = await fenced(tmp_path, "a", f"echo mine > {home}/.claude/notes.md && cat {settings}")
    assert wrote.returncode == 0 and wrote.stdout.strip() == '{"permissions": {}}'
    assert not (home / ".claude" / "notes.md").exists()  # in conversation a's copy only
    other = await fenced(tmp_path, "b", f"cat {home}/.claude/notes.md")
    assert other.returncode != 0  # conversation b's copy never had it
    again = await fenced(tmp_path, "a", f"cat {home}/.claude/notes.md")
    assert again.stdout.strip() == "mine"  # a's copy is kept for a's next process


async def test_a_secret_behind_a_symbolic_link_is_hidden_too(home: Path, tmp_path: Path) -> None:
    keys = home / "keys"
    keys.mkdir()
    (keys / "id_ed25519").write_text("the owner's key")
    (home / ".ssh").symlink_to(keys)
    (home / ".netrc").symlink_to(keys / "id_ed25519")
    read = await fenced(tmp_path, "a", f"cat {home}/.ssh/id_ed25519 {home}/.netrc; ls {keys}")
    assert "the owner's key" not in read.stdout and "id_ed25519" not in read.stdout


async def test_shared_caches_are_private_to_the_conversation(home: Path, tmp_path: Path) -> None:
    """A tool that writes its cache (pip, go build, npm) works, and writes it where no
    other conversation's agent reads it."""
    (home / ".cache").mkdir()
    line = (
        "mkdir -p $XDG_CACHE_HOME/pip $npm_config_cache $GOMODCACHE && "
        "touch $XDG_CACHE_HOME/pip/x $npm_config_cache/x $GOMODCACHE/x && "
        f"echo $XDG_CACHE_HOME $npm_config_cache $GOMODCACHE; touch {home}/.cache/planted"
    )
    done = await fenced(tmp_path, "a", line)
    assert done.stdout.split() == ["/tmp/.cache", "/tmp/.npm", "/tmp/go/pkg/mod"], done.stderr
    assert "Read-only file system" in done.stderr  # the person's own cache: read-only
    assert not (home / ".cache" / "planted").exists()
    other = await fenced(tmp_path, "b", "ls $XDG_CACHE_HOME/pip/x")
    assert other.returncode != 0  # conversation b has its own
