"""What `service install|uninstall` asks systemd, through systemctl: whether a
manager answers at all (without one, every `systemctl` a user is told to run fails
"Failed to connect to bus"), which file it runs a unit from, and disabling it;
and the enable links a unit file leaves behind when systemd cannot remove them."""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
from pathlib import Path

TIMEOUT = 15  # seconds: systemctl answers at once, or its manager is stuck


def systemctl(user_mode: bool) -> list[str]:
    """The systemctl command for this mode, or [] when it is not installed."""
    found = shutil.which("systemctl")
    return [found, *(["--user"] if user_mode else [])] if found else []


def shown(user_mode: bool) -> str:
    """systemctl as a person types it: `systemctl --user`, or `sudo systemctl`."""
    return "systemctl --user" if user_mode else "sudo systemctl"


def unanswered(user_mode: bool) -> str:
    """Why no systemd manager answers here (for --user: this user's), as a clause;
    "" when one does."""
    ctl = systemctl(user_mode)
    if not ctl:
        return "systemctl is not installed"
    try:
        asked = subprocess.run(
            [*ctl, "show", "--property=Version", "--value"],
            capture_output=True, text=True, timeout=TIMEOUT, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"systemctl gave no answer in {TIMEOUT} s"
    if asked.returncode == 0 and asked.stdout.strip():
        return ""
    said = (asked.stderr.strip().splitlines() or ["it gave no answer"])[-1]
    if user_mode:
        return f"no systemd user manager answers for {_user()} (systemctl: {said})"
    return f"systemd is not running on this box ({_init()}; systemctl: {said})"


def _init() -> str:
    try:
        name = Path("/proc/1/comm").read_text().strip()
    except OSError:
        return "PID 1 is not systemd"
    return f"PID 1 is {name}, not systemd"


def _user() -> str:
    return os.environ.get("USER") or getpass.getuser()


def unit_file(user_mode: bool, name: str) -> str | None:
    """The file systemd loads the unit `name` from ("" when it knows no such unit), or
    None when systemd does not answer (not booted with it, no user manager)."""
    ctl = systemctl(user_mode)
    if not ctl:
        return None
    shown_file = subprocess.run(
        [*ctl, "show", "--property=FragmentPath", "--value", name],
        capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    return shown_file.stdout.strip() if shown_file.returncode == 0 else None


def disable(user_mode: bool, path: Path) -> str:
    """Stops and disables the unit; "" when done, else the line that says why not."""
    done = subprocess.run(
        [*systemctl(user_mode), "disable", "--now", path.name],
        capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    if done.returncode == 0:
        return ""
    why = (done.stderr.strip().splitlines() or ["it gave no reason"])[-1]
    return (
        f"tailagent: cannot stop and disable {path.name}: {why}; the unit stays at {path}: "
        f"run `{shown(user_mode)} disable --now {path.stem}`, then uninstall again"
    )


def links_to(path: Path, units: Path) -> list[Path]:
    """The symlinks that lead to the unit file `path`: `systemctl link`'s in the unit
    directory, and `enable`'s in a `*.wants/` or `*.requires/` directory beside the
    file or in the unit directory. Only links to this very file: another unit's are
    never touched."""
    target = path.resolve()
    found: list[Path] = []
    for folder in dict.fromkeys([path.parent, units]):
        candidates = [folder / path.name]
        if folder.is_dir():
            candidates += [
                sub / path.name
                for sub in folder.iterdir()
                if sub.suffix in (".wants", ".requires") and sub.is_dir()
            ]
        found += [
            link
            for link in candidates
            if link.is_symlink() and Path(os.path.realpath(link)) == target
        ]
    return found
