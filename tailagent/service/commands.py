"""`tailagent service install|uninstall`. Installing checks what it can first
(a systemd to run the unit, values a unit can hold, a workspace and config file the
unit can see, options serve accepts), writes the file and says what to run next; it
starts nothing by itself. Uninstalling disables the unit before it removes the file: a file removed
first leaves its service running and its enable links dangling."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from tailagent.service import systemd
from tailagent.service.checks import refusal, serve_words
from tailagent.service.unit import Unit, this_machine, unit_dir, unit_path


def install(
    user_mode: bool,
    workspace: Path,
    config: Path | None,
    dest: Path | None,
    *,
    tsnet: bool = False,
    auth_key_file: Path | None = None,
    options: Mapping[str, object] | None = None,
) -> int:
    options = options or {}
    unanswered = systemd.unanswered(user_mode)
    if unanswered and dest is None:
        print(f"tailagent: {unanswered}, so no unit can run here; {_instead(user_mode)}",
              file=sys.stderr)  # fmt: skip
        return 1
    if auth_key_file is not None and not tsnet:
        print("tailagent: --auth-key-file is for --tsnet units", file=sys.stderr)
        return 2
    words = serve_words(options)
    unit = this_machine(user_mode, workspace, config, tsnet, auth_key_file, words)
    # Each value the unit holds, first: a newline in any would be a line of its own.
    refused = unit.refusal() or refusal(user_mode, workspace, config, options, tsnet)
    if refused:
        print(f"tailagent: {refused}", file=sys.stderr)
        return 2
    if unanswered:
        print(f"note: {unanswered}: the commands below are for a box where it is",
              file=sys.stderr)  # fmt: skip
    path = unit_path(user_mode, dest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(unit.render())
    print(f"wrote {path}")
    if unit.user == "root" and not user_mode:
        print(
            "note: the unit runs the agent as root, with root's rights on this box; run "
            "`service install` as (or with sudo from) the user it should run as",
            file=sys.stderr,
        )
    print("nothing is started; next:")
    custom = path.parent.resolve() != unit_dir(user_mode).resolve()
    for line in next_commands(unit, path, custom=custom, options=options):
        print(f"  {line}")
    return 0


def _instead(user_mode: bool) -> str:
    """What to do on a box where no systemd manager answers."""
    if user_mode:
        return (
            "log in to a session of your own (not su or sudo), or have one kept for you "
            "with `sudo loginctl enable-linger $USER`, then install again; --dest writes "
            "the unit anyway"
        )
    return (
        "run `tailagent serve` under the supervisor this box has (in a container: as its "
        "command), or write the unit for a box booted with systemd with --dest"
    )


def next_commands(unit: Unit, path: Path, custom: bool, options: Mapping[str, object]) -> list[str]:
    """What to run after writing the unit. A unit outside systemd's search path
    (`--dest`) is linked into it first."""
    ctl = systemd.shown(unit.user_mode)
    lines = [f"{ctl} link {path}"] if custom else []
    agent = options.get("--agent")
    if agent:
        lines.append(f"tailagent doctor --agent {agent}   # its CLI and login, as the unit's user")
    lines += [f"{ctl} daemon-reload", f"{ctl} enable --now {path.stem}"]
    if unit.user_mode:
        lines.append(
            f"sudo loginctl enable-linger {unit.user}   # keep it running when you log out"
        )
    if unit.tsnet:
        journal = "journalctl --user" if unit.user_mode else "sudo journalctl"
        how = "its name and URL" if unit.auth_key_file else "the login URL to open (no key given)"
        lines.append(f"{journal} -u tailagent -f   # {how}")
    elif options.get("--tailnet"):
        lines.append(f"sudo tailscale set --operator={unit.user}   # it configures tailscale serve")
    else:
        lines.append(f"sudo tailscale serve --bg unix:{unit.socket}   # put it on your tailnet")
    return lines


def uninstall(user_mode: bool, dest: Path | None) -> int:
    """Stops and disables the unit (when systemd runs this very file), then removes it
    and whatever links to it are left (a box without systemd running keeps them)."""
    path = unit_path(user_mode, dest)
    if not path.is_file():
        print(f"tailagent: no unit at {path}", file=sys.stderr)
        return 1
    known = systemd.unit_file(user_mode, path.name)
    then: list[str] = []
    if known is None:
        said = f"removed {path} (no systemd answers here: nothing ran from it)"
    elif known and Path(known).resolve() == path.resolve():
        refused = systemd.disable(user_mode, path)
        if refused:
            print(refused, file=sys.stderr)
            return 1
        said = f"stopped, disabled and removed {path}"
        then = [f"{systemd.shown(user_mode)} daemon-reload"]
    else:  # a unit of the same name elsewhere is another install, never disabled here
        other = f"; its {path.name} is {known}, left alone" if known else ""
        said = f"removed {path} (systemd ran nothing from it{other})"
    links = systemd.links_to(path, unit_dir(user_mode))
    try:
        for gone in [*links, path]:
            gone.unlink()
    except OSError as exc:
        print(f"tailagent: cannot remove {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
    if links:
        said += ", and the links to it: " + ", ".join(str(link) for link in links)
    print(said + ("; next:" if then else ""))
    for line in then:
        print(f"  {line}")
    return 0
