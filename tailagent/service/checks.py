"""What `service install` checks before it writes a unit: each thing that would
otherwise surface only at `systemctl start`, in the journal, as a unit that fails
or serves something else than was asked (a workspace it cannot see, a config file
it cannot read, options serve would refuse)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tailagent.config import ConfigError
from tailagent.config.sources import load_settings

# The serve options `service install` passes on, and the setting each one sets (the
# listener, the state dir and the store are the unit's own; --tsnet is a Unit field).
SERVE_OPTIONS = {
    "--agent": "agent",
    "--agent-command": "agent_command",
    "--isolation": "workspace.isolation",
    "--hostname": "tsnet.hostname",
    "--public-url": "public_url",
    "--tailnet": "tailnet",
    "--tailnet-port": "tailnet_port",
    "--service": "tailnet_service",
    "--log-level": "log_level",
    "--log-format": "log_format",
}

# Where the system unit's own namespaces hide what the box has there.
_HIDDEN = (
    (Path("/tmp"), "/tmp of its own (PrivateTmp=yes)"),
    (Path("/var/tmp"), "/var/tmp of its own (PrivateTmp=yes)"),
    (Path("/dev"), "/dev of its own (PrivateDevices=yes)"),
)


def serve_words(options: Mapping[str, object]) -> tuple[str, ...]:
    """The given options as serve's command line has them (unset ones left out)."""
    words: list[str] = []
    for option, value in options.items():
        if value is True:
            words.append(option)
        elif value is not None and value is not False:
            words += [option, str(value)]
    return tuple(words)


def refusal(
    user_mode: bool,
    workspace: Path,
    config: Path | None,
    options: Mapping[str, object],
    tsnet: bool,
) -> str:
    """Why the unit asked for could not serve as asked ("" when it could)."""
    if not workspace.is_dir():
        return f"the workspace {workspace} is not a directory"
    if not user_mode:
        for what, path in (("workspace", workspace), ("config file", config)):
            top, hidden = _hidden(path)
            if hidden:
                return (
                    f"the {what} {path} is under {top}, and the system unit has a {hidden}, "
                    "so it would not see it: use one elsewhere (such as in your home), or "
                    "a --user unit"
                )
    flags = {SERVE_OPTIONS[option]: value for option, value in options.items()}
    flags |= {"cwd": str(workspace), "tsnet.enabled": tsnet or None}
    try:
        # As the unit's serve will read them: its environment has no TAILAGENT_*.
        load_settings(flags, config, {})
    except ConfigError as exc:
        return f"config error: {exc}"
    return ""


def _hidden(path: Path | None) -> tuple[Path | None, str]:
    """The directory of the box under which `path` is, and the unit's own one that
    hides it, described; (None, "") when the unit sees it."""
    real = path.resolve() if path is not None else None
    if real is not None:
        for top, what in _HIDDEN:
            if real.is_relative_to(top):
                return top, what
    return None, ""
