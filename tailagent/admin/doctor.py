"""`tailagent doctor`: is everything this box needs in place? One line a check,
with the fix when it is not; a non-zero exit code on any failure."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tailagent.access.forwarding import shared_forwarder
from tailagent.agents.acp.presets import PRESETS, shown_command
from tailagent.card.keys import KeyStore
from tailagent.config import AGENTS, Settings
from tailagent.listening.probe import healthy
from tailagent.output.visible import visible
from tailagent.process import origin
from tailagent.statedir.lock import running_server
from tailagent.store.database import StoreUnavailable, open_database, redacted, sqlite_path
from tailagent.store.keeping import measure
from tailagent.tailnet.localapi import LocalAPI, LocalAPIUnavailable, self_dns_name
from tailagent.tailnet.serve_entry import approved
from tailagent.workspace.conversation_repos.ending.holdings import KINDS, held


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    # More for --json, by name (the agent's package and versions).
    facts: dict[str, str | bool | None] = field(default_factory=dict)


NPM_TIMEOUT = 5.0  # seconds: doctor stays quick when the registry does not answer


def serve_targets(config: dict[str, Any]) -> list[str]:
    """Every backend `tailscale serve` proxies to."""
    targets = []
    for site in (config.get("Web") or {}).values():
        for handler in (site.get("Handlers") or {}).values():
            if handler.get("Proxy"):
                targets.append(str(handler["Proxy"]))
    return targets


def listener_target(settings: Settings) -> str:
    if settings.listen.path is not None:
        return f"unix:{settings.listen.path}"
    return settings.listen.url()


async def _tailscale(settings: Settings) -> list[Check]:
    api = LocalAPI.tailscaled(settings.tailscale.socket)
    try:
        try:
            status = await api.status()
        except LocalAPIUnavailable as exc:
            fix = "start tailscaled (sudo systemctl start tailscaled), or set tailscale.socket"
            down = Check("tailscaled", False, str(exc), fix)
            return [down, Check("whois", False, "needs tailscaled"),
                    Check("tailscale serve", False, "needs tailscaled")]  # fmt: skip
        state = status.get("BackendState", "?")
        running = state == "Running"
        checks = [
            Check(
                "tailscaled",
                running,
                f"version {status.get('Version', '?')}, {state}",
                "" if running else "log this node in: sudo tailscale up",
            )
        ]
        ips = (status.get("Self") or {}).get("TailscaleIPs") or []
        me = await api.whois(ips[0]) if ips else None
        checks.append(
            Check(
                "whois",
                me is not None,
                f"this node is {me.node.name}" if me else "whois of this node found nothing",
                "" if me else "check that tailscaled is logged in",
            )
        )
        target = listener_target(settings)
        config, _ = await api.serve_config()
        served = target in serve_targets(config)
        name = self_dns_name(status) or "this node"
        checks.append(
            Check(
                "tailscale serve",
                served,
                f"https://{name} -> {target}" if served else f"nothing serves {target}",
                ""
                if served
                else f"sudo tailscale serve --bg {target}  (or tailagent serve --tailnet)",
            )
        )
        if settings.tailnet_service:
            name = settings.tailnet_service
            service = (config.get("Services") or {}).get(name) or {}
            serving = (target in serve_targets(service), f"not served to {target}")
            checks.append(await _service(api, status, name, serving))
        return [*checks, *_forwarder(api.socket_path)]
    finally:
        await api.aclose()


async def _service(
    api: LocalAPI,
    status: dict[str, Any],
    name: str,
    served: tuple[bool, str],
    tag_fix: str = "sudo tailscale up --advertise-tags=tag:NAME",
) -> Check:
    """Whether this node hosts the Tailscale Service: tagged, the service approved for it
    by control, advertised, and served (`served`: whether, and how it is said when
    not); what is missing, with its fix."""
    missing: list[tuple[str, str]] = []
    if not (status.get("Self") or {}).get("Tags"):
        missing.append(("not tagged", tag_fix))
    if not approved(status, name):
        missing.append(("not approved", "approve it for this node: admin console, Services"))
    if name not in await api.advertised_services():
        missing.append(("not advertised", f"tailagent serve --service {name}"))
    if not served[0]:
        missing.append((served[1], f"tailagent serve --service {name}"))
    if not missing:
        return Check("service", True, f"{name}: tagged, approved, advertised, served")
    fixes = list(dict.fromkeys(fix for _, fix in missing))
    return Check("service", False, f"{name}: {', '.join(m for m, _ in missing)}", "; ".join(fixes))


def _forwarder(socket_path: Path | None) -> list[Check]:
    """What trusting `X-Forwarded-For` means here (access/forwarding.py), in the words
    the server's start log uses too."""
    said = shared_forwarder(socket_path)
    return [] if said is None else [Check("forwarded-for", True, said.detail, said.fix)]


def _agent(settings: Settings) -> Check:
    if settings.agent_command:
        from tailagent.agents.registry import agent_named

        program = settings.agent_command.split()[0]
        found = shutil.which(program) or (os.path.exists(program) and program)
        return Check(
            "agent",
            bool(found),
            f"ACP agent {agent_named(settings)}",
            "" if found else f"install {program}",
        )
    if settings.agent == "echo":
        return Check("agent", True, "echo (offline)")
    if settings.agent == "claude":
        from tailagent.agents.acp.logins import login_of
        from tailagent.agents.claude import find_cli, login_advice, missing_cli_advice

        cli = find_cli(settings.claude)
        if not cli.usable:
            return Check("agent", False, missing_cli_advice(cli))
        found = f"Claude Code CLI {cli.path} ({cli.source})"
        login = login_of("claude", os.environ, Path.home())
        if login.found is False:
            return Check("agent", False, f"{found}; {login.detail}", login_advice(cli.path))
        return Check("agent", True, found)
    npx = shutil.which("npx")
    if npx is None:
        return Check("agent", False, "npx is not on PATH", "install Node.js and npm")
    return _package(settings.agent, PRESETS[settings.agent].package or "",
                    settings.agent_process.package_version)  # fmt: skip


def _agent_setup(settings: Settings) -> list[Check]:
    """A preset's login, where the agent keeps it in a place tailagent can read, and the
    Node.js its package declares (`engines.node`) against `node --version`: what makes
    an installed agent fail at its first turn instead of here."""
    from tailagent.agents.acp.engines import declared_node, node_version, satisfies
    from tailagent.agents.acp.logins import login_of
    from tailagent.agents.acp.presets import agent_environment

    preset = PRESETS.get(settings.agent)
    if preset is None or settings.agent_command is not None or preset.package is None:
        return []
    env = agent_environment(dict(os.environ), preset, settings.agent_process.env_passthrough)
    login = login_of(preset.name, env, Path(env.get("HOME") or Path.home()))
    checks = [Check("agent login", login.found is not False, login.detail,
                    "" if login.found is not False else preset.login_hint)]  # fmt: skip
    declared = declared_node(preset.package, settings.agent_process.package_version)
    if declared is None:
        return checks
    wanted, manifest = declared
    have = node_version()
    ok = have is not None and satisfies(have, wanted) is not False
    detail = f"{preset.package} asks for Node {wanted} ({manifest}); node is {have or 'missing'}"
    fix = "" if ok else f"install a Node.js {wanted} (nodejs.org, or nvm) for the service's user"
    return [*checks, Check("node", ok, detail, fix)]


async def _sandbox(settings: Settings) -> Check:
    """Whether each agent's sandbox can be made here, as `serve` would make it."""
    from tailagent.sandbox import bwrap, seccomp, view
    from tailagent.sandbox.cgroups import Cgroups

    mode, network = settings.sandbox.mode, settings.sandbox.network
    facts: dict[str, str | bool | None] = {"mode": mode, "network": network}
    if settings.agent == "echo" and settings.agent_command is None:
        return Check("sandbox", True, "none needed: the echo agent runs no process", facts=facts)
    if mode == "off":
        return Check(
            "sandbox", True, "OFF (sandbox.mode = off): agents run unfenced, as the service user",
            'set sandbox.mode = "on" (the default) to fence each conversation\'s agent',
            facts,
        )  # fmt: skip
    try:
        found = await bwrap.check(True, settings.sandbox.bwrap)
        with tempfile.TemporaryDirectory(prefix="tailagent-doctor-") as scratch:
            kernel = await bwrap.check_kernel(
                found, view.proc_options(), seccomp.write_filter(Path(scratch, "filter"))
            )
    except bwrap.SandboxUnavailable as exc:
        return Check("sandbox", False, "no sandbox can be made here", str(exc), facts)
    facts["seccomp"] = f"{len(seccomp.REFUSED) + len(seccomp.REFUSED_IF)} calls refused"
    facts["sees"] = sight(settings)
    facts["between turns"] = Cgroups.find()[1]
    return Check("sandbox", True, f"on ({found}; network: {network}; {kernel}); between "
                 f"turns frozen by {facts['between turns']}; an agent sees {facts['sees']}",
                 facts=facts)  # fmt: skip


def sight(settings: Settings) -> str:
    """What of this box a fenced agent sees, as the fence will show it (sandbox/view.py)."""
    from tailagent.agents.registry import agent_programs
    from tailagent.sandbox import view

    home = Path.home().resolve()
    shown = view.path_folders(os.environ.get("PATH", ""), home)
    shown += view.program_folders(agent_programs(settings), [settings.cwd], home)
    shown += list(settings.sandbox.expose)
    who = (
        f"runs as {settings.sandbox.user}" if settings.sandbox.user
        else "runs as a uid of its own per conversation" if os.geteuid() == 0
        else f"runs as this user (uid {os.getuid()})"
    )  # fmt: skip
    folders = ", ".join(str(p) for p in view.outermost(shown)) or "none"
    return (
        f"its directory, a private /tmp, a home of its own and the system read-only; also "
        f"read-only: {folders}; nothing else of this box; it {who}"
    )


def latest_version(package: str) -> str | None:
    """The registry's latest version of `package` (`npm view`), or None when npm is
    missing or the registry does not answer in NPM_TIMEOUT: doctor runs offline too."""
    npm = shutil.which("npm")
    if npm is None:
        return None
    try:
        done = subprocess.run(
            [npm, "view", package, "version"],
            capture_output=True, text=True, timeout=NPM_TIMEOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (subprocess.TimeoutExpired, OSError):
        return None
    version = done.stdout.strip()
    return version if done.returncode == 0 and version else None


def _release(version: str) -> tuple[int, ...] | None:
    """A plain MAJOR.MINOR.PATCH as numbers; None for anything else (a tag, a range)."""
    parts = version.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def _package(agent: str, package: str, pinned: str | None) -> Check:
    """The npm package a preset runs and its version: the pin, or npm's latest (what
    `npx -y` fetches). An adapter moves fast (claude-agent-acp went from 0.23 to 0.101
    in a year), so a pin older than the latest is named, with how to move it."""
    latest = latest_version(package)
    facts: dict[str, str | bool | None] = {
        "package": package, "version": pinned or latest, "pinned": pinned is not None,
        "latest": latest,
    }  # fmt: skip
    runs = f"{agent} through npx: {package}"
    if pinned is None:
        if latest is None:
            detail = f"{runs}, its latest (could not ask npm which that is)"
        else:
            detail = f"{runs}@{latest} (npm's latest)"
        return Check("agent", True, detail, facts=facts)
    runs = f"{runs}@{pinned} (agent.package_version)"
    if latest is None:
        return Check("agent", True, f"{runs}; could not ask npm for its latest", facts=facts)
    old, new = _release(pinned), _release(latest)
    if old is not None and new is not None and old < new:
        fix = f"set agent.package_version to {latest}, or remove it to run the latest"
        return Check("agent", True, f"{runs}, an old one: npm's latest is {latest}", fix, facts)
    return Check("agent", True, f"{runs}; npm's latest is {latest}", facts=facts)


def _state_dir(settings: Settings) -> Check:
    directory = settings.state_dir
    if not directory.exists():
        return Check("state dir", True, f"{directory} will be made (0700) on first start")
    info = directory.stat()
    mine = info.st_uid == os.getuid()
    private = not stat.S_IMODE(info.st_mode) & 0o077
    return Check(
        "state dir",
        mine and private,
        f"{directory} ({oct(stat.S_IMODE(info.st_mode))})",
        "" if mine and private else f"chmod 700 {directory} (and own it as the service's user)",
    )


def _worktrees(settings: Settings, server: dict[str, str]) -> Check:
    """What tailagent holds in the state dir's worktrees: conversations' directories and
    branches, the worktree made ahead, and what is no conversation's (a running server's
    worktree made ahead is its own; with none running, `tailagent clean` takes it)."""
    root = settings.state_dir / "worktrees"
    found = held(root)
    if not found:
        return Check("worktrees", True, "none kept")
    shown = [h for h in found if not (server and h.kind == "made ahead")]
    counts = {kind: sum(h.kind == kind for h in found) for kind in KINDS}
    said = ", ".join(f"{n} {kind}" for kind, n in counts.items() if n)
    leftover = sum(h.removable for h in shown)
    if leftover:
        said += f"\n  {leftover} no conversation's: `tailagent clean` removes them"
    # A line each, under the folder they are in (once), so each fits in 80 columns.
    lines = "".join(f"\n    {h.entry(root)}" for h in shown)
    return Check("worktrees", True, f"{said}\n  in {root}:{lines}" if lines else said,
                 facts={"leftover": str(leftover)})  # fmt: skip


def _key(settings: Settings) -> Check:
    keys = KeyStore(settings.state_dir)
    if not keys.exists():
        return Check("signing key", True, "none yet: made on first start")
    try:
        key = keys.current()
    except (ValueError, KeyError, OSError) as exc:
        return Check("signing key", False, f"unreadable: {exc}", "tailagent keys rotate")
    return Check("signing key", True, f"{key.alg} {key.kid}")


async def _store(settings: Settings) -> Check:
    """Whether the store answers, and how big it is: what the per-person limits
    (tasks_kept_per_caller, events_kept_per_caller) and the expiry keep in check."""
    where = "SQLite in the state dir" if settings.store is None else redacted(settings.store_url)
    path = sqlite_path(settings.store_url) if settings.store is None else None
    if path is not None and not path.exists():
        return Check("store", True, f"{where}: empty (no server has written it yet)")
    try:
        database = open_database(settings.store_url)
    except StoreUnavailable as exc:
        return Check("store", False, str(exc), "name a file, or a PostgreSQL database")
    try:
        await database.check()
        size = await measure(database)
    except StoreUnavailable as exc:
        return Check("store", False, str(exc), "check the URL, and that the database is up")
    finally:
        await database.aclose()
    facts: dict[str, str | bool | None] = {
        "bytes": str(size.bytes), "tasks": str(size.tasks), "events": str(size.events),
    }  # fmt: skip
    return Check("store", True, f"{where} answers: {size.describe()}", facts=facts)


async def _listener(settings: Settings, server: dict[str, str]) -> Check:
    """The listener of the server running on the state dir (its lock names where it
    listens); with none running there, whatever answers on the configured listener is
    another state dir's server, not this one."""
    target, whose = listener_target(settings), ""
    fix = f"start it: tailagent serve --state-dir {settings.state_dir} (or its systemd unit)"
    if not server:
        if await healthy(target):
            detail = (
                f"no server runs on the state dir {settings.state_dir}; the tailagent "
                f"answering on {target} is another state dir's"
            )
            return Check("listener", False, detail, fix)
        return Check("listener", False, f"nothing answers on {target}", fix)
    running = server.get("listener")
    if running and running != target:
        target, whose = running, " (the running server's)"
    ok = await healthy(target)
    return Check(
        "listener",
        ok,
        f"tailagent answers on {target}{whose}" if ok else f"nothing answers on {target}{whose}",
        "" if ok else fix,
    )


async def _embedded_node(settings: Settings) -> list[Check]:
    """--tsnet: the library, and the node (asked through the running server's LocalAPI)."""
    from tailagent.tailnet.presence import PresenceError
    from tailagent.tailnet.tsnet.auth_key import auth_key
    from tailagent.tailnet.tsnet.client import node_dir, running_node
    from tailagent.tailnet.tsnet.library import LibraryMissing, NodeLibrary

    try:
        library = NodeLibrary.load()
    except (LibraryMissing, OSError) as exc:
        return [Check("tsnet library", False, str(exc))]
    checks = [Check("tsnet library", True, f"tailscale.com {library.version()} ({library.path})")]
    node = running_node(settings.state_dir)
    if node is None:
        if (node_dir(settings.state_dir) / "tailscaled.state").exists():
            detail = "joined before, not running now: a start needs no key"
            return [*checks, Check("tsnet node", True, detail)]
        try:
            _, source = auth_key(settings.tsnet)
        except PresenceError as exc:
            return [*checks, Check("tsnet node", False, str(exc))]
        if source:
            return [*checks, Check("tsnet node", True, f"not joined yet; will join with {source}")]
        fix = "set TS_AUTHKEY or tsnet.auth_key_file, or run serve --tsnet by hand and log in"
        return [*checks, Check("tsnet node", False, "not joined, and no auth key", fix)]
    api = node.localapi()
    try:
        status = await api.status()
        if settings.tailnet_service:  # hosted by the node's own serve: TCP, to the node
            name = settings.tailnet_service
            config, _ = await api.serve_config()
            served = (bool(((config.get("Services") or {}).get(name) or {}).get("TCP")),
                      "not served by the node")  # fmt: skip
            tag = "set tsnet.advertise_tags and restart"
            checks.append(await _service(api, status, name, served, tag_fix=tag))
    except LocalAPIUnavailable as exc:
        return [*checks, Check("tsnet node", False, str(exc), "restart the server")]
    finally:
        await api.aclose()
    me = status.get("Self") or {}
    state = status.get("BackendState", "?")
    tailnet = (status.get("CurrentTailnet") or {}).get("Name", "?")
    expiry = me.get("KeyExpiry") or "never"
    https = "HTTPS" if (status.get("CertDomains") or []) else "no HTTPS certificates (plain HTTP)"
    detail = (
        f"{state} as {self_dns_name(status)} ({', '.join(me.get('TailscaleIPs') or [])}) "
        f"on {tailnet}; key expires {expiry}; {https}"
    )
    fix = "" if state == "Running" else "see the node's log in the state dir's tsnet/node.log"
    return [*checks, Check("tsnet node", state == "Running", detail, fix)]


def _agent_to_check(
    settings: Settings, server: dict[str, str], asked: bool
) -> tuple[Settings, str]:
    """The settings whose agent to check, and what its line adds to say whose agent it
    is. An agent the person named (--agent, --agent-command) wins: that is the one they
    want to know about, and the line says when the running server runs another. Else
    the agent of the server running on this state dir, whose readiness matters."""
    running = server.get("agent")
    if not running:
        return settings, ""
    if asked:
        named = settings.agent_command or settings.agent
        if named == running:
            return settings, " (the running server's)"
        if running not in AGENTS:
            running = f"`{shown_command(running)}`"
        return settings, f" (you asked; the running server runs {running})"
    if running in AGENTS:
        return replace(settings, agent=running, agent_command=None), " (the running server's)"
    return replace(settings, agent_command=running), " (the running server's)"


async def diagnose(settings: Settings, asked_agent: bool) -> list[Check]:
    """Every check; `asked_agent`: the person named the agent to check with a flag."""
    server = running_server(settings.state_dir) or {}  # the server on this state dir
    # A running server's way onto the tailnet is the one to check, however doctor ran.
    if settings.tsnet.enabled or server.get("tsnet") == "True":
        checks = await _embedded_node(settings)
    else:
        checks = await _tailscale(settings)
    checked, whose = _agent_to_check(settings, server, asked_agent)
    agent = _agent(checked)
    agent = replace(agent, detail=agent.detail + whose)
    checks += [_key(settings), agent, *_agent_setup(checked), await _sandbox(checked)]
    checks += [_state_dir(settings)]
    checks += [await _store(settings), _worktrees(settings, server)]
    return [Check("install", True, origin.describe()), *checks, await _listener(settings, server)]


def doctor_command(settings: Settings, as_json: bool, asked_agent: bool) -> int:
    checks = asyncio.run(diagnose(settings, asked_agent))
    _print(checks, as_json)
    return 0 if all(c.ok for c in checks) else 1


def _as_json(check: Check) -> dict[str, Any]:
    """A check's name, ok, detail and fix, and its facts (if any) beside them."""
    fields = asdict(check)
    facts = fields.pop("facts")
    return {**fields, **facts}


def _print(checks: list[Check], as_json: bool) -> None:
    if as_json:
        print(json.dumps([_as_json(c) for c in checks]))
    else:
        for c in checks:
            mark = "✓" if c.ok else "✗"
            # A detail may quote the agent, tailscaled or the store: shown escaped.
            print(visible(f"{mark} {c.name}: {c.detail}" + (f" — fix: {c.fix}" if c.fix else "")))
    sys.stdout.flush()  # a closed pipe shows here, where `cli.run` ends quietly
