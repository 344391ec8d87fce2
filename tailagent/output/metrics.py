"""Prometheus metrics, in tailagent's own registry, served at /metrics to admins."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter(
    "tailagent_requests", "HTTP requests by route and status.", ["route", "status"],
    registry=REGISTRY,
)  # fmt: skip
REFUSALS = Counter(
    "tailagent_refusals", "Requests the access layer refused, by reason.", ["reason"],
    registry=REGISTRY,
)  # fmt: skip
TASK_STATES = Counter(
    "tailagent_task_states", "Tasks entering each state.", ["state"], registry=REGISTRY
)
TURN_SECONDS = Histogram(
    "tailagent_turn_seconds", "How long agent turns take, start to end (pauses included).",
    buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900, 3600), registry=REGISTRY,
)  # fmt: skip
AGENT_PROCESSES = Gauge(
    "tailagent_agent_sessions", "Live agent sessions (for ACP and Claude: processes).",
    registry=REGISTRY,
)  # fmt: skip
SANDBOX_PROXY_REFUSED = Gauge(
    "tailagent_sandbox_proxy_refused",
    "Connections the sandbox's proxies refused to fenced agents since the start.",
    registry=REGISTRY,
)  # fmt: skip
AGENT_SESSIONS_HELD = Gauge(
    "tailagent_agent_sessions_held",
    "Agent sessions lent to a task, running or waiting for an answer (idle ones give way).",
    registry=REGISTRY,
)  # fmt: skip
TURNS_WAITING = Gauge(
    "tailagent_turns_waiting",
    "Message sends waiting for one of the agent.max_concurrent_turns places.",
    registry=REGISTRY,
)  # fmt: skip
# Measured at each scrape (store/size.py): what the per-person limits keep in check.
STORE_BYTES = Gauge(
    "tailagent_store_bytes",
    "The store's size on disk: SQLite's file and write-ahead log, or the PostgreSQL database.",
    registry=REGISTRY,
)  # fmt: skip
STORE_ROWS = Gauge(
    "tailagent_store_rows", "Rows in the store's growing tables (tasks, task_events).",
    ["table"], registry=REGISTRY,
)  # fmt: skip
WHOIS = Counter(
    "tailagent_whois", "LocalAPI whois lookups, by outcome (cache_hit, found, not_found).",
    ["outcome"], registry=REGISTRY,
)  # fmt: skip
PROMPTS = Counter(
    "tailagent_permission_prompts", "Prompts put to callers, by kind.", ["kind"],
    registry=REGISTRY,
)  # fmt: skip
DECISIONS = Counter(
    "tailagent_permission_decisions", "Permission decisions, by decision and by whom.",
    ["decision", "by"], registry=REGISTRY,
)  # fmt: skip
PUSH_DELIVERIES = Counter(
    "tailagent_push_deliveries", "Push notifications, by outcome (delivered, failed, refused).",
    ["outcome"], registry=REGISTRY,
)  # fmt: skip
WEBPUSH_SENT = Counter(
    "tailagent_webpush", "Web Push messages to the desk's subscribers, by outcome "
    "(sent, gone, failed, retried).", ["outcome"], registry=REGISTRY,
)  # fmt: skip
COST_USD = Counter(
    "tailagent_cost_usd", "What agent turns cost in US dollars, as the agent reported it, by "
    "caller (login or tags; past the first 100, \"other\").", ["caller"], registry=REGISTRY,
)  # fmt: skip
TOKENS = Counter(
    "tailagent_tokens", "Tokens agent turns used, by caller and kind (input, output).",
    ["caller", "kind"], registry=REGISTRY,
)  # fmt: skip
COSTS_REFUSED = Counter(
    "tailagent_costs_refused", "Cost figures an agent (or an echo prompt) reported that were "
    "not a finite number within the bounds (a turn's dollars, a session's running total, "
    "a token count), refused and never stored.", ["figure"], registry=REGISTRY,
)  # fmt: skip
# Callers named in the cost labels; past this many, a new one counts as "other", so one
# label per person cannot grow the exposition without bound.
MAX_CALLER_LABELS = 100
_caller_labels: set[str] = set()


def caller_label(person: str) -> str:
    """The metrics' name for a person: theirs while the first MAX_CALLER_LABELS last."""
    if person in _caller_labels:
        return person
    if len(_caller_labels) >= MAX_CALLER_LABELS:
        return "other"
    _caller_labels.add(person)
    return person


def route_of(path: str) -> str:
    """A route name of bounded cardinality (task ids stay out of labels)."""
    if path == "/":
        return "jsonrpc"
    if path.startswith(("/message:", "/tasks", "/extendedAgentCard", "/v1/")):
        return "rest"
    if path.startswith("/.well-known/"):
        return "card"
    if path in ("/healthz", "/metrics"):
        return path[1:]
    if path == "/desk" or path.startswith("/desk/"):
        return "desk"
    return "other"


def exposition() -> bytes:
    return generate_latest(REGISTRY)


TSNET_NODE = Info(
    "tailagent_tsnet_node", "The embedded tailnet node (--tsnet): state, name, addresses.",
    registry=REGISTRY,
)  # fmt: skip
TSNET_KEY_EXPIRY = Gauge(
    "tailagent_tsnet_key_expiry_timestamp_seconds",
    "When the embedded node's key expires (Unix time; 0 when it does not).", registry=REGISTRY,
)  # fmt: skip
TSNET_CONNECTIONS = Gauge(
    "tailagent_tsnet_connections", "Tailnet connections the embedded node has forwarded.",
    registry=REGISTRY,
)  # fmt: skip
