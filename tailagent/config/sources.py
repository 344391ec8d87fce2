"""Where the settings come from: a TOML file < the environment < command-line flags,
merged key by key, each value checked as it is read (checks.py), then the whole
checked for settings that cannot go together."""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tailagent.config import checks
from tailagent.config.mcp_servers import parse_mcp_servers
from tailagent.config.settings import (
    AGENTS,
    ENV_PREFIX,
    HTTPS_MODES,
    LOG_LEVELS,
    PEER_SCHEMES,
    PERMISSION_MODES,
    SANDBOX_MODES,
    SANDBOX_NETWORKS,
    AccessSettings,
    AgentSettings,
    AttachmentSettings,
    BudgetSettings,
    ClaudeSettings,
    ConfigError,
    DelegationSettings,
    DeskSettings,
    PushSettings,
    SandboxSettings,
    Settings,
    TailscaleSettings,
    TsnetSettings,
    WorkspaceSettings,
)
from tailagent.config.tool_rules import parse_rules

PARSERS: dict[str, Callable[[Any], Any]] = {
    "agent": checks.one_of(AGENTS),
    "agent_command": checks.nonempty_text,
    "cwd": checks.existing_directory,
    "listen": checks.listen_address,
    "public_url": checks.http_url,
    "box_url": checks.http_url,
    "drain_seconds": checks.positive_number,
    "state_dir": checks.file_path,
    "store": checks.store_url,
    "name": checks.nonempty_text,
    "max_body_bytes": checks.positive_int,
    "body_timeout": checks.positive_number,
    "max_json_depth": checks.positive_int,
    "max_parts": checks.positive_int,
    "max_json_values": checks.positive_int,
    "max_streams_per_caller": checks.positive_int,
    "events_kept": checks.count,
    "events_kept_hours": checks.positive_number,
    "tasks_kept_per_caller": checks.positive_int,
    "events_kept_per_caller": checks.positive_int,
    "ended_tasks_kept_hours": checks.positive_number,
    "max_permission_denials": checks.positive_int,
    "log_level": checks.one_of(LOG_LEVELS),
    "log_format": checks.one_of(("text", "json")),
    "card_lists_0_3": checks.boolean,
    "tailnet": checks.boolean,
    "tailnet_port": checks.positive_int,
    "tailnet_service": checks.service_name,
    "rules": parse_rules,
    "mcp_servers": parse_mcp_servers,
    "access.allowed_logins": checks.string_list,
    "access.allowed_tags": checks.tag_list,
    "access.login_roles": checks.role_list,
    "access.tag_roles": checks.role_list,
    "access.capability": checks.capability,
    "access.require_token": checks.boolean,
    "access.allowed_origins": checks.origin_list,
    "access.local_without_token": checks.boolean,
    "tailscale.socket": checks.file_path,
    "agent.package_version": checks.nonempty_text,
    "agent.env_passthrough": checks.string_list,
    "agent.idle_timeout": checks.positive_number,
    "agent.max_processes": checks.positive_int,
    "agent.max_processes_per_caller": checks.positive_int,
    "agent.max_concurrent_turns": checks.positive_int,
    "agent.warm_spares": checks.count,
    "agent.start_timeout": checks.positive_number,
    "agent.cancel_timeout": checks.positive_number,
    "agent.terminal_output_limit": checks.positive_int,
    "agent.max_terminals_per_turn": checks.positive_int,
    "agent.max_file_bytes": checks.positive_int,
    "agent.caller_modes": checks.string_list,
    "claude.cwd": checks.existing_directory,
    "claude.permission_mode": checks.one_of(PERMISSION_MODES),
    "claude.model": checks.nonempty_text,
    "claude.allowed_tools": checks.string_list,
    "claude.setting_sources": checks.setting_source_list,
    "claude.max_turns": checks.positive_int,
    "claude.max_permission_denials": checks.positive_int,
    "claude.permission_prompts": checks.one_of(("input-required", "deny")),
    "claude.cli_path": checks.file_path,
    "claude.cancel_timeout": checks.positive_number,
    "attachments.max_part_bytes": checks.positive_int,
    "attachments.max_message_bytes": checks.positive_int,
    "attachments.url_hosts": checks.string_list,
    "push.allowed_hosts": checks.string_list,
    "push.attempts": checks.positive_int,
    "push.retry_delay": checks.positive_number,
    "push.timeout": checks.positive_number,
    "push.max_configs_per_task": checks.positive_int,
    "desk.push_services": checks.push_service_list,
    "desk.push_ttl": checks.positive_int,
    "tsnet.enabled": checks.boolean,
    "tsnet.hostname": checks.hostname,
    "tsnet.control_url": checks.http_url,
    "tsnet.advertise_tags": checks.tag_list,
    "tsnet.ephemeral": checks.boolean,
    "tsnet.auth_key_file": checks.file_path,
    "tsnet.https": checks.one_of(HTTPS_MODES),
    "workspace.isolation": checks.isolation,
    "workspace.base": checks.nonempty_text,
    "workspace.git_programs": checks.boolean,
    "workspace.max_worktrees_per_caller": checks.positive_int,
    "workspace.shared_repository": checks.shared_repository,
    "budgets.per_caller_daily_usd": checks.dollars,
    "budgets.per_task_usd": checks.dollars,
    "budgets.reserve_usd": checks.dollars,
    "sandbox.mode": checks.one_of(SANDBOX_MODES),
    "sandbox.network": checks.one_of(SANDBOX_NETWORKS),
    "sandbox.allow_hosts": checks.string_list,
    "sandbox.expose": checks.path_list,
    "sandbox.user": checks.nonempty_text,
    "sandbox.hide": checks.path_list,
    "sandbox.bwrap": checks.file_path,
    "delegation.allowed_nodes": checks.node_list,
    "delegation.max_depth": checks.depth,
    "delegation.roles": checks.delegated_role_list,
    "delegation.window_seconds": checks.positive_number,
    "delegation.siblings": checks.node_list,
    "delegation.allow_peers": checks.string_list,
    "delegation.scheme": checks.one_of(PEER_SCHEMES),
    "delegation.port": checks.port,
    "delegation.proxy": checks.proxy_url,
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
    "desk": "desk",
    "tsnet": "tsnet",
    "workspace": "workspace",
    "budgets": "budgets",
    "sandbox": "sandbox",
    "delegation": "delegation",
}
SECTION_TYPES = {
    "access": AccessSettings,
    "tailscale": TailscaleSettings,
    "agent": AgentSettings,
    "claude": ClaudeSettings,
    "attachments": AttachmentSettings,
    "push": PushSettings,
    "desk": DeskSettings,
    "tsnet": TsnetSettings,
    "workspace": WorkspaceSettings,
    "budgets": BudgetSettings,
    "sandbox": SandboxSettings,
    "delegation": DelegationSettings,
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
    values: Mapping[str, Any],
    source: str,
    into: dict[str, Any],
    origins: dict[str, str],
    problems: list[ConfigError],
) -> None:
    """Checks and takes each value; what is wrong goes to `problems`, every one of
    them, so a file with three mistakes takes one edit, not three starts."""
    for key, raw in values.items():
        origins[key] = source
        parser = PARSERS.get(key)
        if parser is None:
            problems.append(_unknown(source, key, raw))
            continue
        try:
            into[key] = parser(raw)
        except ValueError as exc:
            problems.append(ConfigError(source, key, str(exc)))


def _unknown(source: str, key: str, raw: Any) -> ConfigError:
    """An unknown key, with the one probably meant; a table (`[acess]`) is an unknown
    section, and the section probably meant is named (its keys were not checked)."""
    if isinstance(raw, dict):
        near = difflib.get_close_matches(key, SECTION_TYPES, n=1)
        hint = f"did you mean [{near[0]}]?" if near else f"the sections: {', '.join(SECTION_TYPES)}"
        return ConfigError(source, f"[{key}]", f"unknown section; {hint}")
    near = difflib.get_close_matches(key, PARSERS, n=1)
    hint = f"did you mean {near[0]!r}?" if near else "see docs/configuration.md"
    return ConfigError(source, key, f"unknown key; {hint}")


# Read where they are used, not as settings (config.cli_state_dir's own is a setting).
OTHER_VARIABLES = (
    "TAILAGENT_CONFIG", "TAILAGENT_TOKEN", "TAILAGENT_KNOWN_AGENTS", "TAILAGENT_TSNET_LIBRARY"
)  # fmt: skip


def unknown_environment(environ: Mapping[str, str]) -> list[str]:
    """A line for each `TAILAGENT_*` variable tailagent does not read: a misspelt
    setting would otherwise be ignored without a word."""
    known = [_env_name(key) for key in PARSERS] + list(OTHER_VARIABLES)
    lines = []
    for name in sorted(n for n in environ if n.startswith(ENV_PREFIX) and n not in known):
        near = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {near[0]}?" if near else "see docs/configuration.md"
        lines.append(f"the environment's {name} is no tailagent setting, ignored; {hint}")
    return lines


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
    problems: list[ConfigError] = []
    if config_file is not None:
        file_values = _flatten(read_config_file(config_file))
        _apply(file_values, str(config_file), merged, origins, problems)
    environ = os.environ if environ is None else environ
    from_env = {key: environ[_env_name(key)] for key in PARSERS if environ.get(_env_name(key))}
    _apply(from_env, "environment", merged, origins, problems)
    flagged = {k: v for k, v in flags.items() if v is not None}
    _apply(flagged, "command line", merged, origins, problems)
    if problems:
        raise ConfigError.several(problems)
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
