"""The home as a fenced agent sees it, made by the real Sandbox and run in real bubblewrap:
its login file written only when nothing else logs it in, its settings the person's and
fixed, the rest of its state a private copy per conversation."""

from __future__ import annotations

import os
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
    """A refreshed login reaches the next conversation (a refresh revokes the old token).
    As root, agents run as uids of their own, which cannot open the person's file: each
    has a copy, and a refreshed copy goes back to the person's file before the next
    conversation's is made."""
    login = home / ".claude" / ".credentials.json"
    refreshed = await fenced(tmp_path, "a", f'echo \'{{"token": "refreshed"}}\' > {login}')
    assert refreshed.returncode == 0, refreshed.stderr
    seen = await fenced(tmp_path, "b", f"cat {login}")
    assert seen.stdout.strip() == '{"token": "refreshed"}'  # the next conversation's
    assert login.read_text().strip() == '{"token": "refreshed"}'
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    swapped = await fenced(tmp_path, "c", f'echo \'{{"token": "another account"}}\' > {login}')
    if os.geteuid() != 0:
        assert swapped.returncode != 0 and "Read-only file system" in swapped.stderr
    await fenced(tmp_path, "d", "true")
    assert "another account" not in login.read_text()  # with a key, never written back


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
    assert "No such file or directory" in done.stderr  # the person's cache: not there
    assert not (home / ".cache" / "planted").exists()
    other = await fenced(tmp_path, "b", "ls $XDG_CACHE_HOME/pip/x")
    assert other.returncode != 0  # conversation b has its own


# Secrets with names no list holds, and another tailagent's state in the README's default
# place: a home of its own shows none of them (issue 54).
UNLISTED = {
    ".vault-token": "hvs.the-owner-s-vault-token",
    ".config/git/credentials": "https://owner:ghp_token@github.com",
    ".cargo/credentials.toml": "[registry]\ntoken = 'the owner's crates.io token'",
    ".bash_history": "export AWS_SECRET_ACCESS_KEY=the-owner-s",
    ".config/rclone/rclone.conf": "[s3]\nsecret_access_key = the-owner-s",
    ".local/state/tailagent/local-token": "another-server-s-admin-token",
    ".local/state/tailagent/signing-keys.json": '{"the other server": "key"}',
}


async def test_a_home_of_its_own_holds_no_secret_whatever_its_name(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, text in UNLISTED.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    # A toolchain in the home, on PATH: its shim runs the rest of it, so it is shown whole.
    tool = home / ".pyenv" / "libexec"
    tool.mkdir(parents=True)
    (tool / "real-tool").write_text("#!/bin/sh\necho the toolchain runs\n")
    (tool / "real-tool").chmod(0o755)
    shims = home / ".pyenv" / "shims"
    shims.mkdir()
    (shims / "tool").write_text(f"#!/bin/sh\nexec {tool}/real-tool\n")
    (shims / "tool").chmod(0o755)
    (home / ".cargo" / "bin").mkdir(parents=True)
    monkeypatch.setenv("PATH", f"{shims}:{home / '.cargo' / 'bin'}:/usr/bin:/bin")
    names = " ".join(str(home / name) for name in UNLISTED)
    done = await fenced(tmp_path, "a", f"cat {names}; echo $(ls -A {home}); tool; ls {home}/.cargo")
    for text in UNLISTED.values():
        assert text not in done.stdout
    assert "the toolchain runs" in done.stdout
    # What the home holds: the agent's own entries and the toolchains; no credentials
    # beside ~/.cargo/bin.
    assert done.stdout.split("\n")[0].split() == [".cargo", ".claude", ".claude.json", ".pyenv"]
    assert "credentials.toml" not in done.stdout
