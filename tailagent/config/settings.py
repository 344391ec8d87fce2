"""The server's settings: what there is to set, and its defaults.

One Settings object, read from a TOML file < the environment < command-line flags
(sources.py), each value checked as it is read (checks.py): a bad one stops the start
with a single line naming where it came from, the key, and what is wrong. The settings
know nothing of the bridge or the agents.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from tailagent.agent_kinds import KINDS
from tailagent.config.mcp_servers import McpServer
from tailagent.config.tool_rules import Rule

AGENTS = tuple(KINDS)  # the names `--agent` and the config file's `agent` accept
PERMISSION_MODES = ("default", "acceptEdits", "plan", "bypassPermissions", "dontAsk", "auto")
SETTING_SOURCES = ("user", "project", "local")
LOG_LEVELS = ("debug", "info", "warning", "error")
ENV_PREFIX = "TAILAGENT_"
DEFAULT_URL = "http://127.0.0.1:3008"  # where `tailagent call` looks by default


class ConfigError(Exception):
    """A setting that stops the start; str() is what the user sees, a line for each
    setting that is wrong (ConfigError.several)."""

    def __init__(self, source: str, key: str, problem: str) -> None:
        super().__init__(f"{source}: {key}: {problem}")

    @classmethod
    def several(cls, problems: list[ConfigError]) -> ConfigError:
        """Every problem found, one a line: the one error when there is one."""
        if len(problems) == 1:
            return problems[0]
        joined = cls("", "", "")
        joined.args = ("\n".join(str(problem) for problem in problems),)
        return joined


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
    # The most of them one caller's tasks may hold; None: half, rounded up.
    max_processes_per_caller: int | None = None
    max_concurrent_turns: int = 64
    warm_spares: int = 1
    start_timeout: float = 120.0
    cancel_timeout: float = 5.0
    terminal_output_limit: int = 256 * 1024
    max_terminals_per_turn: int = 16
    # The largest file an agent reads or writes through ACP, and the most a range of
    # lines read from a larger one may come to.
    max_file_bytes: int = 8 * 1024 * 1024
    # The modes a caller who is not admin may choose; None: the agent's own list of
    # modes that keep asking (none for an ACP agent tailagent does not know).
    caller_modes: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ClaudeSettings:
    """Claude Code through the Claude Agent SDK (the `[claude]` table)."""

    cwd: Path | None = None
    permission_mode: str = "acceptEdits"
    model: str | None = None
    allowed_tools: tuple[str, ...] = ()
    # The person's own settings only: a repository's `.claude/settings*.json` (which the
    # agent can write in its worktree) could allow tools tailagent would ask about.
    setting_sources: tuple[str, ...] = ("user",)
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
    # Configs one task may hold: each state change is one signed POST to each.
    max_configs_per_task: int = 8


# The push services of the browsers people use (Chrome and Android, Firefox, Safari and
# iOS, Edge): the desk sends Web Push to a subscription's endpoint only on one of these.
DEFAULT_PUSH_SERVICES = (
    "fcm.googleapis.com",
    "*.push.services.mozilla.com",
    "*.push.apple.com",
    "*.notify.windows.com",
)


@dataclass(frozen=True, slots=True)
class DeskSettings:
    """The approval desk (the `[desk]` table): where its Web Push may go."""

    # Hosts (`*.` for any subdomain) reached over https, or origins `http://127.0.0.1:PORT`
    # for a push service on this box.
    push_services: tuple[str, ...] = DEFAULT_PUSH_SERVICES
    # How long a push service keeps a notification for a phone that is offline.
    push_ttl: int = 6 * 3600


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


ISOLATION_MODES = ("repository", "shared")
# The value `repository` had until each conversation had a repository of its own (issue
# 41): still read, as `repository`, saying so once (config/checks.py, isolation).
ISOLATION_OLD_NAME = "worktree"


@dataclass(frozen=True, slots=True)
class WorkspaceSettings:
    """How conversations share the workspace: each in a git repository and branch of its
    own (`repository`, when the workspace is a git repository), or all in it (`shared`)."""

    isolation: str = "repository"
    base: str | None = None  # the branch conversations start from; None: the current one
    # Let tailagent's git run the repository's hooks and filter/merge drivers (Git LFS):
    # off, none of them runs on the files an agent wrote (workspace/git.py says why).
    git_programs: bool = False
    # Worktrees one person's conversations may hold at once: each costs a checkout, and
    # stays until it is merged or discarded.
    max_worktrees_per_caller: int = 20
    # Where each turn's commit is pushed as it is made, for a team's boxes (a bare
    # repository's path or URL): another box takes a conversation over from there when
    # its box is gone. None: commits stay on the box that made them.
    shared_repository: str | None = None


SANDBOX_MODES = ("on", "off")
SANDBOX_NETWORKS = ("on", "allowlist", "none")


@dataclass(frozen=True, slots=True)
class SandboxSettings:
    """The fence around each conversation's agent (the `[sandbox]` table; see
    tailagent/sandbox/). On unless the operator says `off`, which every report states."""

    mode: str = "on"
    # `on`: the agent reaches the network as the box does (its model's API), never the
    # server's sockets; `allowlist`: only through tailagent's proxy to `allow_hosts`;
    # `none`: no network at all.
    network: str = "on"
    # Hosts the allowlist's proxy lets through, beside the agent's own API hosts.
    allow_hosts: tuple[str, ...] = ()
    # More paths the agent sees, read-only (beside the system, its PATH and its programs).
    expose: tuple[Path, ...] = ()
    # Paths the agent must not see even inside what is shown (beside the state dir).
    hide: tuple[Path, ...] = ()
    # The bubblewrap to use; None: `bwrap` on PATH, else /usr/bin/bwrap.
    bwrap: Path | None = None
    # A server run as root runs each conversation's agent as a uid of its own; a login
    # name here runs every agent as that user instead. Never root.
    user: str = ""


@dataclass(frozen=True, slots=True)
class BudgetSettings:
    """What the agent's work may cost (the `[budgets]` table), in US dollars, as the agent
    reports it. None: no limit."""

    # What one person may spend in a UTC day, unless `tailagent budget set` gave them
    # their own figure.
    per_caller_daily_usd: float | None = None
    # What one task may spend: the Claude Agent SDK's `max_budget_usd`, and the end of a
    # turn that crosses it. Also what a turn reserves of its person's day when admitted.
    per_task_usd: float | None = None
    # What a turn reserves of its person's day when admitted, where no per_task_usd caps
    # it: a figure the operator accepts as a turn's cost (cost/budgets.py). None: the
    # rest of the day's budget, so such a person runs one turn at a time against it.
    reserve_usd: float | None = None


DELEGATED_ROLES = ("caller", "approver")
PEER_SCHEMES = ("http", "https")


@dataclass(frozen=True, slots=True)
class DelegationSettings:
    """Work handed between tailagents (the `[delegation]` table). Inbound: which nodes
    may hand work here for a person, and how far a chain of hops may reach; outbound:
    which peers this node hands work to without asking, and how their URLs are made."""

    # Nodes that may hand work here: tags ("tag:build") or names ("devbox-1", or the
    # MagicDNS name); a node whose grant under access.capability says {"delegate": true}
    # may too.
    allowed_nodes: tuple[str, ...] = ()
    max_depth: int = 3
    # The most a delegated request gets, whatever the person may do here directly: it
    # acts for them through another box, so never as the owner of this one.
    roles: tuple[str, ...] = DELEGATED_ROLES
    # How old the calling hop's signature may be: a replayed one is refused within it.
    window_seconds: float = 60.0
    # The team's other boxes, sharing this one's store (and service name): a request for
    # work that runs on one of them is carried there for the person (cluster/carry.py),
    # and a person's request one of them carries here gets what it would directly.
    siblings: tuple[str, ...] = ()
    allow_peers: tuple[str, ...] = ()
    scheme: str = "https"
    port: int = 443
    proxy: str = ""  # an HTTP proxy onto the tailnet (tailscaled's outbound proxy)


@dataclass(frozen=True, slots=True)
class Settings:
    agent: str = "claude"
    agent_command: str | None = None
    cwd: Path = field(default_factory=Path.cwd)
    listen: Listen = field(default_factory=Listen)
    public_url: str | None = None
    # This box's own URL, when public_url is a name several boxes share (a Tailscale
    # Service): where siblings carry requests for the work that runs here.
    box_url: str | None = None
    # A box with siblings that stops drains first: new conversations go to the
    # siblings, and its working turns get this long to end (cluster/placement.py).
    drain_seconds: float = 30.0
    state_dir: Path = field(default_factory=default_state_dir)
    store: str | None = None
    name: str = "tailagent"
    max_body_bytes: int = 4 * 1024 * 1024
    # What a request may cost before a2a-sdk parses it (access/bodies.py): the seconds
    # its whole body may take to arrive, and the shape of a JSON body.
    body_timeout: float = 60.0
    max_json_depth: int = 32
    max_parts: int = 256
    max_json_values: int = 2_000
    # Streams (SSE: A2A's streamed sends and subscriptions, the desk's live pages) one
    # caller may hold open at once; each holds a connection, a descriptor, until it ends.
    max_streams_per_caller: int = 32
    # Each task's numbered events kept for a stream taken up again (store/events.py).
    events_kept: int = 10_000
    events_kept_hours: float = 24.0
    # What one person may keep in the store, and for how long an ended task stays
    # (store/keeping.py argues the defaults).
    tasks_kept_per_caller: int = 1_000
    events_kept_per_caller: int = 100_000
    ended_tasks_kept_hours: float = 720.0
    max_permission_denials: int = 3
    log_level: str = "info"
    log_format: str = "text"
    card_lists_0_3: bool = True
    tailnet: bool = False
    tailnet_port: int = 443
    # A Tailscale Service (svc:agents) the box's tailscaled serves this server under,
    # beside or instead of its own name (tailnet/serve_entry.py); implies `tailnet`.
    tailnet_service: str = ""
    rules: tuple[Rule, ...] = ()
    mcp_servers: tuple[McpServer, ...] = ()
    access: AccessSettings = field(default_factory=AccessSettings)
    agent_process: AgentSettings = field(default_factory=AgentSettings)
    claude: ClaudeSettings = field(default_factory=ClaudeSettings)
    attachments: AttachmentSettings = field(default_factory=AttachmentSettings)
    push: PushSettings = field(default_factory=PushSettings)
    desk: DeskSettings = field(default_factory=DeskSettings)
    tailscale: TailscaleSettings = field(default_factory=TailscaleSettings)
    tsnet: TsnetSettings = field(default_factory=TsnetSettings)
    workspace: WorkspaceSettings = field(default_factory=WorkspaceSettings)
    budgets: BudgetSettings = field(default_factory=BudgetSettings)
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    delegation: DelegationSettings = field(default_factory=DelegationSettings)

    @property
    def store_url(self) -> str:
        """Where tasks, sessions and the audit log live: SQLite in the state dir unless
        `store` names a database several servers share."""
        return self.store or f"sqlite+aiosqlite:///{self.state_dir / 'tailagent.db'}"

    @property
    def advertised_url(self) -> str:
        return (self.public_url or self.listen.url()).rstrip("/")

    @property
    def own_url(self) -> str:
        """This box's URL, not a name it shares with its siblings."""
        return (self.box_url or self.advertised_url).rstrip("/")
