"""One settings object for the server: TOML file < environment < command-line flags.

Every value is validated at start, and a bad one stops the start with a single
line naming where it came from, the key, and what is wrong.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tailagent.mcp_servers import McpServer, parse_mcp_servers
from tailagent.tool_rules import Rule, parse_rules

AGENTS = ("echo", "claude", "claude-acp", "codex", "gemini")
PERMISSION_MODES = ("default", "acceptEdits", "plan", "bypassPermissions", "dontAsk", "auto")
SETTING_SOURCES = ("user", "project", "local")
LOG_LEVELS = ("debug", "info", "warning", "error")
ENV_PREFIX = "TAILAGENT_"
DEFAULT_URL = "http://127.0.0.1:3008"  # where `tailagent call` looks by default


class ConfigError(Exception):
    """A setting that stops the start; str() is the one line the user sees."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        super().__init__(f"{source}: {key}: {problem}")


@dataclass(frozen=True, slots=True)
class Listen:
    """Where the server listens: a loopback TCP address or a unix socket path."""

    host: str = "127.0.0.1"
    port: int = 3008
    path: Path | None = None

    @property
    def is_unix(self) -> bool:
        return self.path is not None

    def bind(self) -> str:
        if self.path is not None:
            return f"unix:{self.path}"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    def url(self) -> str:
        return "http://localhost" if self.path is not None else f"http://{self.bind()}"


def parse_listen(value: str) -> Listen:
    """Parses `HOST:PORT`, `[::1]:PORT` or `unix:/path`, refusing any non-loopback host."""
    if value.startswith("unix:"):
        path = Path(value.removeprefix("unix:"))
        if not path.is_absolute():
            raise ValueError("a unix socket path must be absolute, e.g. unix:/run/tailagent/sock")
        return Listen(path=path)
    host, sep, port_text = value.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{value!r} is not HOST:PORT, [::1]:PORT or unix:/path")
    host = host.removeprefix("[").removesuffix("]")
    if not _loopback_host(host):
        raise ValueError(
            f"refusing to listen on {value}: tailagent listens only on loopback or a unix "
            "socket; expose it on your tailnet with `tailscale serve`"
        )
    return Listen(host="127.0.0.1" if host == "localhost" else host, port=int(port_text))


def default_state_dir() -> Path:
    if os.environ.get("STATE_DIRECTORY"):
        # systemd may list several, colon-separated; the first is ours.
        return Path(os.environ["STATE_DIRECTORY"].split(":")[0])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tailagent"


def cli_state_dir(given: str | Path | None = None) -> Path:
    """The state dir a CLI command means: --state-dir, else $TAILAGENT_STATE_DIR, else
    the default (where a server run by this user keeps its state)."""
    chosen = given or os.environ.get("TAILAGENT_STATE_DIR")
    return Path(chosen) if chosen else default_state_dir()


def _loopback_host(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_loopback_url(url: str) -> bool:
    """An http(s) URL of this box: localhost or a loopback address."""
    return _loopback_host(urlsplit(url).hostname or "")


ROLES = ("caller", "approver", "admin")


@dataclass(frozen=True, slots=True)
class AccessSettings:
    """Who may call, and what they may do (the `[access]` table)."""

    allowed_logins: tuple[str, ...] = ()
    allowed_tags: tuple[str, ...] = ()
    login_roles: tuple[str, ...] = ("caller", "approver")
    tag_roles: tuple[str, ...] = ("caller",)
    capability: str | None = None
    require_token: bool = False
    allowed_origins: tuple[str, ...] = ()
    local_without_token: bool = False


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """How agent processes are run (the `[agent]` table)."""

    package_version: str | None = None
    env_passthrough: tuple[str, ...] = ()
    idle_timeout: float = 1800.0
    max_processes: int = 8
    max_concurrent_turns: int = 64
    warm_spares: int = 1
    start_timeout: float = 120.0
    cancel_timeout: float = 5.0
    terminal_output_limit: int = 256 * 1024
    max_terminals_per_turn: int = 16


@dataclass(frozen=True, slots=True)
class ClaudeSettings:
    """Claude Code through the Claude Agent SDK (the `[claude]` table)."""

    cwd: Path | None = None
    permission_mode: str = "acceptEdits"
    model: str | None = None
    allowed_tools: tuple[str, ...] = ()
    setting_sources: tuple[str, ...] = SETTING_SOURCES
    max_turns: int | None = None
    max_permission_denials: int | None = None
    permission_prompts: str = "input-required"
    cli_path: Path | None = None
    cancel_timeout: float = 10.0


@dataclass(frozen=True, slots=True)
class AttachmentSettings:
    """Files callers attach (the `[attachments]` table)."""

    max_part_bytes: int = 2 * 1024 * 1024
    max_message_bytes: int = 3 * 1024 * 1024
    url_hosts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PushSettings:
    """Push notifications to callers (the `[push]` table)."""

    allowed_hosts: tuple[str, ...] = ()
    attempts: int = 5
    retry_delay: float = 1.0
    timeout: float = 10.0


@dataclass(frozen=True, slots=True)
class TailscaleSettings:
    """How to reach tailscaled (the `[tailscale]` table)."""

    socket: Path | None = None


HTTPS_MODES = ("auto", "on", "off")


@dataclass(frozen=True, slots=True)
class TsnetSettings:
    """tailagent as a tailnet node of its own, with tsnet embedded (the `[tsnet]` table)."""

    enabled: bool = False
    hostname: str = "tailagent"
    control_url: str | None = None
    advertise_tags: tuple[str, ...] = ()
    ephemeral: bool = False
    auth_key_file: Path | None = None
    https: str = "auto"


ISOLATION_MODES = ("worktree", "shared")


@dataclass(frozen=True, slots=True)
class WorkspaceSettings:
    """How conversations share the workspace: each in a git worktree and branch of its
    own (`worktree`, when the workspace is a git repository), or all in it (`shared`)."""

    isolation: str = "worktree"
    base: str | None = None  # the branch conversations start from; None: the current one


@dataclass(frozen=True, slots=True)
class Settings:
    agent: str = "claude"
    agent_command: str | None = None
    cwd: Path = field(default_factory=Path.cwd)
    listen: Listen = field(default_factory=Listen)
    public_url: str | None = None
    state_dir: Path = field(default_factory=default_state_dir)
    store: str | None = None
    name: str = "tailagent"
    max_body_bytes: int = 4 * 1024 * 1024
    max_permission_denials: int = 3
    log_level: str = "info"
    log_format: str = "text"
    card_lists_0_3: bool = True
    tailnet: bool = False
    tailnet_port: int = 443
    rules: tuple[Rule, ...] = ()
    mcp_servers: tuple[McpServer, ...] = ()
    access: AccessSettings = field(default_factory=AccessSettings)
    agent_process: AgentSettings = field(default_factory=AgentSettings)
    claude: ClaudeSettings = field(default_factory=ClaudeSettings)
    attachments: AttachmentSettings = field(default_factory=AttachmentSettings)
    push: PushSettings = field(default_factory=PushSettings)
    tailscale: TailscaleSettings = field(default_factory=TailscaleSettings)
    tsnet: TsnetSettings = field(default_factory=TsnetSettings)
    workspace: WorkspaceSettings = field(default_factory=WorkspaceSettings)

    @property
    def store_url(self) -> str:
        """Where tasks, sessions and the audit log live: SQLite in the state dir unless
        `store` names a database several servers share."""
        return self.store or f"sqlite+aiosqlite:///{self.state_dir / 'tailagent.db'}"

    @property
    def advertised_url(self) -> str:
        return (self.public_url or self.listen.url()).rstrip("/")


def _choice(options: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}, not {value!r}")
        return str(value)

    return check


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a non-empty string, not {value!r}")
    return value


def _directory(value: Any) -> Path:
    path = Path(_text(value)).expanduser().resolve()
    if not path.is_dir():
        raise ValueError(f"{path} is not a directory")
    return path


def _path(value: Any) -> Path:
    return Path(_text(value)).expanduser().resolve()


def _positive_int(value: Any) -> int:
    return int(_positive(value, int, "integer"))


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.lower() in ("true", "1", "yes")
    raise ValueError(f"must be true or false, not {value!r}")


def _store(value: Any) -> str:
    """A SQLAlchemy async URL; a plain postgresql:// URL gets the asyncpg driver."""
    url = _text(value)
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            url = "postgresql+asyncpg://" + url.removeprefix(plain)
    if not url.startswith(("postgresql+asyncpg://", "sqlite+aiosqlite://")):
        raise ValueError(
            "must be a postgresql:// (or postgresql+asyncpg://) or sqlite+aiosqlite:// URL"
        )
    return url


def _strings(value: Any) -> tuple[str, ...]:
    """A list of strings; from the environment, comma-separated."""
    if isinstance(value, str):
        value = [item.strip() for item in value.split(",") if item.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"must be a list of strings, not {value!r}")
    return tuple(value)


def _tags(value: Any) -> tuple[str, ...]:
    tags = _strings(value)
    bad = [t for t in tags if not t.startswith("tag:")]
    if bad:
        raise ValueError(f"tags start with 'tag:', not {bad[0]!r}")
    return tags


def _roles(value: Any) -> tuple[str, ...]:
    roles = _strings(value)
    bad = [r for r in roles if r not in ROLES]
    if bad:
        raise ValueError(f"roles are {', '.join(ROLES)}, not {bad[0]!r}")
    return roles


def _capability(value: Any) -> str:
    text = _text(value)
    if "/" not in text or " " in text:
        raise ValueError(f"must look like example.com/cap/tailagent, not {text!r}")
    return text


def _origins(value: Any) -> tuple[str, ...]:
    origins = _strings(value)
    bad = [o for o in origins if urlsplit(o).scheme not in ("http", "https") or o.endswith("/")]
    if bad:
        raise ValueError(f"an origin is scheme://host[:port], not {bad[0]!r}")
    return origins


def _positive_number(value: Any) -> float:
    return _positive(value, float, "number")


def _positive(value: Any, kind: type[int] | type[float], noun: str) -> float:
    """`kind(value)` if it is above zero; a boolean is refused, though Python counts it."""
    problem = ValueError(f"must be a positive {noun}, not {value!r}")
    if isinstance(value, bool):
        raise problem
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise problem from None
    if number <= 0:
        raise problem
    return number


def _count(value: Any) -> int:
    if value in (0, "0"):
        return 0
    return _positive_int(value)


def _setting_sources(value: Any) -> tuple[str, ...]:
    sources = _strings(value) if value != [] else ()
    bad = [s for s in sources if s not in SETTING_SOURCES]
    if bad:
        raise ValueError(f"sources are {', '.join(SETTING_SOURCES)}, not {bad[0]!r}")
    return sources


def _listen(value: Any) -> Listen:
    return parse_listen(_text(value))


def _hostname(value: Any) -> str:
    text = _text(value).lower()
    if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", text):
        raise ValueError(
            f"must be a DNS label (letters, digits and inner hyphens, at most 63), not {value!r}"
        )
    return text


def _url(value: Any) -> str:
    text = _text(value)
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"must be an http(s) URL, not {text!r}")
    return text.rstrip("/")


PARSERS: dict[str, Callable[[Any], Any]] = {
    "agent": _choice(AGENTS),
    "agent_command": _text,
    "cwd": _directory,
    "listen": _listen,
    "public_url": _url,
    "state_dir": _path,
    "store": _store,
    "name": _text,
    "max_body_bytes": _positive_int,
    "max_permission_denials": _positive_int,
    "log_level": _choice(LOG_LEVELS),
    "log_format": _choice(("text", "json")),
    "card_lists_0_3": _boolean,
    "tailnet": _boolean,
    "tailnet_port": _positive_int,
    "rules": parse_rules,
    "mcp_servers": parse_mcp_servers,
    "access.allowed_logins": _strings,
    "access.allowed_tags": _tags,
    "access.login_roles": _roles,
    "access.tag_roles": _roles,
    "access.capability": _capability,
    "access.require_token": _boolean,
    "access.allowed_origins": _origins,
    "access.local_without_token": _boolean,
    "tailscale.socket": _path,
    "agent.package_version": _text,
    "agent.env_passthrough": _strings,
    "agent.idle_timeout": _positive_number,
    "agent.max_processes": _positive_int,
    "agent.max_concurrent_turns": _positive_int,
    "agent.warm_spares": _count,
    "agent.start_timeout": _positive_number,
    "agent.cancel_timeout": _positive_number,
    "agent.terminal_output_limit": _positive_int,
    "agent.max_terminals_per_turn": _positive_int,
    "claude.cwd": _directory,
    "claude.permission_mode": _choice(PERMISSION_MODES),
    "claude.model": _text,
    "claude.allowed_tools": _strings,
    "claude.setting_sources": _setting_sources,
    "claude.max_turns": _positive_int,
    "claude.max_permission_denials": _positive_int,
    "claude.permission_prompts": _choice(("input-required", "deny")),
    "claude.cli_path": _path,
    "claude.cancel_timeout": _positive_number,
    "attachments.max_part_bytes": _positive_int,
    "attachments.max_message_bytes": _positive_int,
    "attachments.url_hosts": _strings,
    "push.allowed_hosts": _strings,
    "push.attempts": _positive_int,
    "push.retry_delay": _positive_number,
    "push.timeout": _positive_number,
    "tsnet.enabled": _boolean,
    "tsnet.hostname": _hostname,
    "tsnet.control_url": _url,
    "tsnet.advertise_tags": _tags,
    "tsnet.ephemeral": _boolean,
    "tsnet.auth_key_file": _path,
    "tsnet.https": _choice(HTTPS_MODES),
    "workspace.isolation": _choice(ISOLATION_MODES),
    "workspace.base": _text,
}
# TOML table -> Settings field; `agent` is also a plain key (which agent), so its
# table lands in `agent_process`.
SECTIONS = {
    "access": "access",
    "tailscale": "tailscale",
    "agent": "agent_process",
    "claude": "claude",
    "attachments": "attachments",
    "push": "push",
    "tsnet": "tsnet",
    "workspace": "workspace",
}
SECTION_TYPES = {
    "access": AccessSettings,
    "tailscale": TailscaleSettings,
    "agent": AgentSettings,
    "claude": ClaudeSettings,
    "attachments": AttachmentSettings,
    "push": PushSettings,
    "tsnet": TsnetSettings,
    "workspace": WorkspaceSettings,
}


def _flatten(values: Mapping[str, Any]) -> dict[str, Any]:
    """TOML tables become dotted keys: `[access] require_token` -> `access.require_token`."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if key in SECTION_TYPES and isinstance(value, dict):
            value = dict(value)
            if key == "agent" and "name" in value:
                # TOML cannot hold both `agent = "echo"` and an [agent] table: there,
                # the chosen agent is the table's `name`.
                flat["agent"] = value.pop("name")
            flat.update({f"{key}.{inner}": v for inner, v in value.items()})
        else:
            flat[key] = value
    return flat


def _build(merged: Mapping[str, Any]) -> Settings:
    top = {k: v for k, v in merged.items() if "." not in k}
    for section, cls in SECTION_TYPES.items():
        values = {k.split(".", 1)[1]: v for k, v in merged.items() if k.startswith(section + ".")}
        top[SECTIONS[section]] = cls(**values)
    return Settings(**top)


def _apply(
    values: Mapping[str, Any], source: str, into: dict[str, Any], origins: dict[str, str]
) -> None:
    for key, raw in values.items():
        origins[key] = source
        parser = PARSERS.get(key)
        if parser is None:
            near = difflib.get_close_matches(key, PARSERS, n=1)
            hint = f"did you mean {near[0]!r}?" if near else "see the README's Configuration"
            raise ConfigError(source, key, f"unknown key; {hint}")
        try:
            into[key] = parser(raw)
        except ValueError as exc:
            raise ConfigError(source, key, str(exc)) from None


def _env_name(key: str) -> str:
    return ENV_PREFIX + key.replace(".", "_").upper()


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(str(path), "(file)", f"cannot read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), "(file)", _toml_problem(path, exc)) from None


def _toml_problem(path: Path, error: tomllib.TOMLDecodeError) -> str:
    """The parser's complaint, and for the one people make here, what to write."""
    said = f"not valid TOML: {error}"
    if "Cannot overwrite a value" in str(error):
        text = path.read_text(errors="replace")
        for section in SECTION_TYPES:
            value = re.search(rf"(?m)^\s*{section}\s*=\s*(.+?)\s*$", text)
            if value and re.search(rf"(?m)^\s*\[{section}\]", text):
                hint = f"`name = {value.group(1)}` inside it" if section == "agent" else (
                    f"the `{section}` settings inside it"
                )  # fmt: skip
                return (
                    f"{said}. `{section}` is both a value and the table [{section}]: TOML "
                    f"allows one; keep the table and write {hint}"
                )
    return said


def load_settings(
    flags: Mapping[str, Any],
    config_file: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Merges file, environment and flags (None flags are unset) into validated Settings."""
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}  # key -> where its value came from
    if config_file is not None:
        _apply(_flatten(read_config_file(config_file)), str(config_file), merged, origins)
    environ = os.environ if environ is None else environ
    from_env = {key: environ[_env_name(key)] for key in PARSERS if environ.get(_env_name(key))}
    _apply(from_env, "environment", merged, origins)
    _apply({k: v for k, v in flags.items() if v is not None}, "command line", merged, origins)
    settings = _build(merged)
    _check_together(settings, origins)
    return settings


def _check_together(settings: Settings, origins: Mapping[str, str]) -> None:
    """Settings that are each valid but cannot be used together."""
    if settings.tsnet.enabled and settings.tailnet:
        raise ConfigError(
            origins.get("tsnet.enabled", "settings"), "tsnet.enabled",
            "--tsnet (its own tailnet node) and --tailnet (the box's tailscaled serves it) "
            "are two ways onto the tailnet: pick one",
        )  # fmt: skip
    if settings.tsnet.enabled and settings.listen.is_unix:
        raise ConfigError(
            origins.get("listen", "settings"), "listen",
            "--tsnet forwards to a loopback TCP listener (whois names callers by its "
            "ip:port): use --listen 127.0.0.1:PORT",
        )  # fmt: skip
