"""The state dir check warns only about what someone opened, never about what tailagent
made itself (issue 56): a real `tailagent serve` under umask 022 with a fenced agent of a
preset, installed as tailagent installs npm packages (a fake package in its install
folder, so no registry is needed), started twice; then a folder opened by hand.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tailagent.sandbox import bwrap
from tests.conftest import start_server
from tests.test_isolation import make_project
from tests.test_worktree_newcomer import completed

pytestmark = pytest.mark.skipif(bwrap.find() is None, reason="needs bubblewrap for a fence")

VENV_PACKAGES = Path(sys.executable).parent.parent / "lib/python3.11/site-packages"
OPEN = "was open to other users"
SYSTEM_PYTHON = "/usr/bin/python3"  # shown in a fence, unlike a venv's


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The umask most boxes have (022), so nothing is private unless tailagent makes it so."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def install_fake_gemini(home: Path) -> None:
    """The Gemini CLI preset's package as tailagent's install leaves it in `home`
    (`~/.cache/tailagent/agents/<package>@<version>`, its `.installed` mark last): its
    program runs tests/fake_acp_agent.py with the system's Python, which a fence shows,
    and the few packages it needs beside it."""
    folder = home / ".cache/tailagent/agents/@google+gemini-cli@1.0.0"
    package = folder / "node_modules/@google/gemini-cli"
    package.mkdir(parents=True)
    (package / "package.json").write_text(json.dumps({"bin": {"gemini": "gemini.js"}}))
    shutil.copy(Path(__file__).parent / "fake_acp_agent.py", folder / "agent.py")
    for name in ("acp", "pydantic", "pydantic_core", "annotated_types", "typing_inspection"):
        shutil.copytree(VENV_PACKAGES / name, folder / "packages" / name)
    shutil.copy(VENV_PACKAGES / "typing_extensions.py", folder / "packages")
    program = folder / "node_modules/.bin/gemini"
    program.parent.mkdir()
    program.write_text(
        f"#!/bin/sh\nPYTHONPATH={folder}/packages exec {SYSTEM_PYTHON} {folder}/agent.py\n"
    )
    program.chmod(0o755)
    (folder / ".installed").write_text("@google/gemini-cli@1.0.0\n")
    login = home / ".gemini/oauth_creds.json"
    login.parent.mkdir()
    login.write_text("{}")


def opened(state_dir: Path) -> list[str]:
    """The folders tailagent keeps its sandboxes' things in that others may enter."""
    folders = [state_dir / "sandboxes", *(state_dir / "sandboxes").iterdir()]
    return [f.name for f in folders if f.is_dir() and stat.S_IMODE(f.stat().st_mode) & 0o077]


@pytest.mark.skipif(not Path(SYSTEM_PYTHON).exists(), reason="needs the system's python3")
@pytest.mark.usefixtures("loose_umask")
def test_no_warning_about_what_tailagent_made_and_one_about_what_someone_opened(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    install_fake_gemini(home)
    make_project(tmp_path / "workspace")
    config = tmp_path / "tailagent.toml"
    config.write_text('[agent]\npackage_version = "1.0.0"\n')
    env = {**os.environ, "HOME": str(home)}
    flags = ("--agent", "gemini", "--config", str(config))
    server = start_server(tmp_path, *flags, env=env)
    try:
        assert "sandbox: on" in server.log(), server.log()
        completed(server, "edit:notes.txt hello")  # an A2A client's: the CLI is not tested
        assert opened(server.state_dir) == []
    finally:
        server.stop()
    again = start_server(tmp_path, *flags, env=env, state_dir=server.state_dir)
    try:
        completed(again, "hello")
        assert OPEN not in again.log(), again.log()
        assert opened(again.state_dir) == []
    finally:
        again.stop()

    (server.state_dir / "worktrees").chmod(0o755)  # someone opened one of its folders
    third = start_server(tmp_path, *flags, env=env, state_dir=server.state_dir)
    try:
        assert f"the state dir {server.state_dir} {OPEN}; closed: worktrees (0755)" in third.log()
        assert "sandboxes" not in next(x for x in third.log().splitlines() if OPEN in x)
    finally:
        third.stop()
