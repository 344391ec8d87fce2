"""An npm agent, installed by tailagent once per version, where every fenced agent can run
it and none can change it.

Unfenced, a preset starts as `npx -y PACKAGE`, which fetches into npm's shared cache
(`~/.npm`). Fenced, that cannot work and must not: the home is read-only inside a
sandbox, and a cache every conversation's agent could write is a place to plant code for
the next one (npx's `_npx` folders hold the installed packages that later runs execute).
So tailagent installs the package itself, into a folder of its own per version
(`~/.cache/tailagent/agents/PACKAGE@VERSION`), with npm run in a fence of that folder
alone (the package's install scripts reach nothing else) and a cache inside it, and then
starts the package's program from there. Agents see the folder read-only, like the rest
of the home.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from tailagent.agents.events import AgentStartError
from tailagent.sandbox.fences import Fence

log = logging.getLogger("tailagent.agents")

INSTALL_TIMEOUT = 900.0  # seconds: a first install downloads tens of MB (claude-agent-acp: 85)
VIEW_TIMEOUT = 15.0
COMPLETE = ".installed"  # written last: a folder without it is an install cut short


def agents_dir() -> Path:
    return Path.home() / ".cache" / "tailagent" / "agents"


def _folder_name(package: str, version: str) -> str:
    return re.sub(r"[^A-Za-z0-9._@+-]", "_", package.replace("/", "+")) + "@" + version


def _npm() -> str:
    npm = shutil.which("npm")
    if npm is None:
        raise AgentStartError(
            "cannot start the agent: 'npm' is not on PATH (install Node.js and npm)"
        )
    return npm


async def _run(argv: list[str], within: float) -> tuple[int, str, str]:
    """`argv`'s exit status, stdout and stderr; -1 and why, when it ran past `within`."""
    child = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(child.communicate(), within)
    except TimeoutError:
        child.kill()
        await child.wait()
        return -1, "", f"{Path(argv[0]).name} gave no answer within {within:.0f} s"
    return child.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")


async def _version(package: str, pinned: str | None) -> str:
    """The version to run: the pinned one, else the registry's latest, else (offline) the
    newest already installed here."""
    if pinned:
        return pinned
    code, out, err = await _run([_npm(), "view", package, "version"], VIEW_TIMEOUT)
    if code == 0 and out.strip():
        return out.strip().splitlines()[-1].strip()
    prefix = _folder_name(package, "")
    installed = sorted(
        p.name.removeprefix(prefix)
        for p in agents_dir().glob(prefix + "*")
        if (p / COMPLETE).exists()
    )
    if installed:
        log.info("npm does not answer (%s): running %s@%s, installed earlier",
                 err.strip()[-200:], package, installed[-1])  # fmt: skip
        return installed[-1]
    raise AgentStartError(
        f"cannot find {package}'s latest version (npm view: {err.strip()[-300:] or code}): "
        "check the box reaches the npm registry, or pin one with agent.package_version"
    )


async def installed(package: str, pinned: str | None, fence_for: Callable[[Path], Fence]) -> Path:
    """The folder holding `package` (at `pinned`, else the latest), installed now if it
    is not yet, by npm inside `fence_for(folder)`."""
    version = await _version(package, pinned)
    folder = agents_dir() / _folder_name(package, version)
    if (folder / COMPLETE).exists():
        return folder
    partial = folder.with_name(folder.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True, mode=0o755)
    log.info("installing %s@%s for fenced agents, once (into %s)", package, version, folder)
    fence = fence_for(partial)
    cache = partial / ".npm-cache"
    argv = fence.wrap([
        "env", f"npm_config_cache={cache}", "npm_config_update_notifier=false",
        "npm_config_logs_max=0", _npm(), "install", "--no-audit", "--no-fund", "--no-save",
        "--prefix", str(partial), f"{package}@{version}",
    ], cwd=partial)  # fmt: skip
    code, _, err = await _run(argv, INSTALL_TIMEOUT)
    if code != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise AgentStartError(f"could not install {package}@{version}: {err.strip()[-400:]}")
    shutil.rmtree(cache, ignore_errors=True)
    (partial / COMPLETE).write_text(f"{package}@{version}\n")
    if folder.exists():  # another server installed it meanwhile
        shutil.rmtree(partial, ignore_errors=True)
    else:
        partial.rename(folder)
    return folder


def program(folder: Path, package: str) -> Path:
    """The installed package's program (its package.json `bin`), as npm linked it."""
    manifest = json.loads((folder / "node_modules" / package / "package.json").read_text())
    bins = manifest.get("bin")
    if isinstance(bins, str):
        name = package.rsplit("/", 1)[-1]
    elif isinstance(bins, dict) and bins:
        own = package.rsplit("/", 1)[-1]
        name = own if own in bins else next(iter(bins))
    else:
        raise AgentStartError(f"{package} has no program to run (no `bin` in its package.json)")
    return folder / "node_modules" / ".bin" / name
