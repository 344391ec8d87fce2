"""A real, throwaway PostgreSQL server for the store tests: a fresh cluster per use,
on a free loopback port, gone afterwards. It needs Debian's server binaries
(`apt-get install postgresql`); without them the caller skips with `postgres_missing()`."""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

INSTALL = "PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install postgresql"
# PostgreSQL refuses to run as root, so as root the cluster belongs to the Debian package's user.
USER = "postgres"


class PostgresMissing(RuntimeError):
    """No server to start here; the message says what to install."""


def _bin_dir() -> Path | None:
    """Newest Debian version first (several may be installed side by side), then PATH."""
    versions = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if p.parent.name.isdigit()]
    for bin_dir in sorted(versions, key=lambda p: int(p.parent.name), reverse=True):
        if (bin_dir / "initdb").is_file() and (bin_dir / "pg_ctl").is_file():
            return bin_dir
    initdb = shutil.which("initdb")  # resolved: pg_ctl finds `postgres` beside itself
    return Path(initdb).resolve().parent if initdb and shutil.which("pg_ctl") else None


def postgres_missing() -> str | None:
    """Why no server can be started here (a pytest skip reason), or None if one can."""
    if _bin_dir() is None:
        return INSTALL
    if os.geteuid() == 0:
        try:
            pwd.getpwnam(USER)
        except KeyError:
            return f"running as root and no {USER} user to run the server as: {INSTALL}"
        if shutil.which("runuser") is None:
            return "running as root and no runuser (util-linux) to drop to the postgres user"
    return None


def _free_port() -> int:
    """A port the kernel just handed out; the tiny race until postgres binds it is fine."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run(*command: str | Path, cwd: Path, check: bool = True) -> None:
    """Run a PostgreSQL tool, as `postgres` when we are root; a failure carries its output."""
    prefix = ["runuser", "-u", USER, "--"] if os.geteuid() == 0 else []
    done = subprocess.run(
        [*prefix, *map(str, command)], cwd=cwd, capture_output=True, text=True, check=False
    )
    if check and done.returncode != 0:
        log = cwd / "server.log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        raise RuntimeError(f"{command[0]} failed ({done.returncode}):\n{done.stderr}{tail}")


@dataclass
class Postgres:
    """A running throwaway server: its SQLAlchemy URL, and a way to take it down and
    bring it back (the same data, the same port) for outage tests."""

    url: str
    directory: Path
    bin_dir: Path
    options: str

    def stop(self, mode: str = "fast") -> None:
        """Fast (the default) writes what was committed first: commits here are
        asynchronous (synchronous_commit=off), so an immediate stop may lose the last
        ones. Unchecked, so a failed stop never hides an error."""
        _run(self.bin_dir / "pg_ctl", "stop", "-w", "-m", mode, "-D",
             self.directory / "data", cwd=self.directory, check=False)  # fmt: skip

    def start(self) -> None:
        _run(self.bin_dir / "pg_ctl", "start", "-w", "-D", self.directory / "data", "-l",
             self.directory / "server.log", "-o", self.options, cwd=self.directory)  # fmt: skip


@contextmanager
def running_postgres(base: Path | None = None) -> Iterator[Postgres]:
    """Start a fresh server holding an empty `tailagent` database; stop it and delete
    its files on exit, whatever happened.

    `base` holds the cluster's directory (default: the system temp dir). As root,
    every directory above it must be searchable by `postgres`: pytest's tmp_path
    is not (/tmp/pytest-of-root is mode 0700)."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        raise PostgresMissing(INSTALL)
    directory = Path(tempfile.mkdtemp(prefix="pg-", dir=base))
    port = _free_port()
    # Loopback only, sockets in our own directory (not /var/run/postgresql), and no
    # durability: the data dies with the test anyway.
    options = f"-h 127.0.0.1 -p {port} -k {shlex.quote(str(directory))} -F"
    options += " -c synchronous_commit=off -c full_page_writes=off"
    url = f"postgresql+asyncpg://{USER}@127.0.0.1:{port}/tailagent"
    server = Postgres(url, directory, bin_dir, options)
    try:
        if os.geteuid() == 0:
            shutil.chown(directory, USER, USER)
        cluster = ("-U", USER, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
        _run(bin_dir / "initdb", "-D", directory / "data", *cluster, cwd=directory)
        server.start()
        _run(bin_dir / "createdb", "-h", "127.0.0.1", "-p", str(port), "-U", USER, "tailagent",
             cwd=directory)  # fmt: skip
        yield server
    finally:
        server.stop("immediate")  # the data dies with it: nothing to flush
        shutil.rmtree(directory, ignore_errors=True)
