"""How each setting's value is read and checked, wherever it came from (a TOML
value, or the text of an environment variable or a flag): each returns the value
in its settled type, or raises ValueError saying what is wrong with it."""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tailagent.config.settings import (
    DELEGATED_ROLES,
    ISOLATION_MODES,
    ISOLATION_OLD_NAME,
    ROLES,
    SETTING_SOURCES,
    Listen,
    parse_listen,
)

log = logging.getLogger(__name__)


def one_of(options: tuple[str, ...]) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError(f"must be one of {', '.join(options)}, not {value!r}")
        return str(value)

    return check


def isolation(value: Any) -> str:
    """`workspace.isolation`: `repository` or `shared`; the old `worktree` is read as
    `repository`, with a line saying so, so a config or unit written before still works."""
    if value == ISOLATION_OLD_NAME:
        log.warning(
            'workspace.isolation "worktree" is now called "repository" (each conversation '
            "has a git repository of its own); the old name still works"
        )
        return "repository"
    return one_of(ISOLATION_MODES)(value)


def nonempty_text(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a non-empty string, not {value!r}")
    return value


def existing_directory(value: Any) -> Path:
    path = Path(nonempty_text(value)).expanduser().resolve()
    if not path.is_dir():
        raise ValueError(f"{path} is not a directory")
    return path


def file_path(value: Any) -> Path:
    return Path(nonempty_text(value)).expanduser().resolve()


# How git reaches a repository named by a URL, by the URL's scheme: the one transport
# tailagent's git is let use for it (workspace/git.py switches every other off).
_GIT_SCHEMES = {"file": "file", "ssh": "ssh", "git+ssh": "ssh", "https": "https", "http": "http"}
# `user@host:path`, git's short form of an ssh URL.
_SCP_LIKE = re.compile(r"[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:.+")


def remote_protocol(url: str) -> str:
    """The transport git takes to reach the repository `url` names (`file` for a local
    path); ValueError for one tailagent does not reach (a relative path, a helper's
    `ext::` or any scheme git would hand to a program)."""
    scheme, colon, _ = url.partition("://")
    if colon:
        if scheme in _GIT_SCHEMES:
            return _GIT_SCHEMES[scheme]
        raise ValueError(f"{url!r}: git is let reach a repository by file, ssh or http(s) only")
    if url.startswith("/"):
        return "file"
    if _SCP_LIKE.fullmatch(url):
        return "ssh"
    raise ValueError(f"{url!r} is neither an absolute path nor a file, ssh or http(s) URL")


def shared_repository(value: Any) -> str:
    """`workspace.shared_repository`: where each turn's commit is pushed for the other
    boxes of a team (workspace/conversation_repos/handover.py): a bare repository's
    absolute path or its URL."""
    url = nonempty_text(value).strip()
    remote_protocol(url)
    return url


def positive_int(value: Any) -> int:
    return int(_positive(value, int, "integer"))


def boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.lower() in ("true", "1", "yes")
    raise ValueError(f"must be true or false, not {value!r}")


def store_url(value: Any) -> str:
    """A SQLAlchemy async URL; a plain postgresql:// URL gets the asyncpg driver."""
    url = nonempty_text(value)
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            url = "postgresql+asyncpg://" + url.removeprefix(plain)
    if not url.startswith(("postgresql+asyncpg://", "sqlite+aiosqlite://")):
        raise ValueError(
            "must be a postgresql:// (or postgresql+asyncpg://) or sqlite+aiosqlite:// URL"
        )
    return url


def string_list(value: Any) -> tuple[str, ...]:
    """A list of strings; from the environment, comma-separated."""
    if isinstance(value, str):
        value = [item.strip() for item in value.split(",") if item.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"must be a list of strings, not {value!r}")
    return tuple(value)


def path_list(value: Any) -> tuple[Path, ...]:
    """Absolute paths (`~` is the service user's home); from the environment,
    comma-separated."""
    paths = tuple(Path(item).expanduser() for item in string_list(value))
    relative = [str(p) for p in paths if not p.is_absolute()]
    if relative:
        raise ValueError(f"paths must be absolute (or start with ~): {', '.join(relative)}")
    return paths


def tag_list(value: Any) -> tuple[str, ...]:
    tags = string_list(value)
    bad = [t for t in tags if not t.startswith("tag:")]
    if bad:
        raise ValueError(f"tags start with 'tag:', not {bad[0]!r}")
    return tags


def role_list(value: Any) -> tuple[str, ...]:
    roles = string_list(value)
    bad = [r for r in roles if r not in ROLES]
    if bad:
        raise ValueError(f"roles are {', '.join(ROLES)}, not {bad[0]!r}")
    return roles


def capability(value: Any) -> str:
    text = nonempty_text(value)
    if "/" not in text or " " in text:
        raise ValueError(f"must look like example.com/cap/tailagent, not {text!r}")
    return text


def origin_list(value: Any) -> tuple[str, ...]:
    origins = string_list(value)
    bad = [o for o in origins if urlsplit(o).scheme not in ("http", "https") or o.endswith("/")]
    if bad:
        raise ValueError(f"an origin is scheme://host[:port], not {bad[0]!r}")
    return origins


LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
_HOST_PATTERN = re.compile(
    r"^(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+$"
)


def push_service_list(value: Any) -> tuple[str, ...]:
    """Web Push services: a host (`*.` for any subdomain), reached over https; or an
    `http://` origin on this box, for a push service of one's own (a test's)."""
    services = string_list(value)
    for service in services:
        if "://" not in service:
            if not _HOST_PATTERN.match(service.lower()):
                raise ValueError(
                    f"a push service is a host such as *.push.apple.com, not {service!r}"
                )
            continue
        parts = urlsplit(service)
        if parts.scheme == "https" and parts.hostname and parts.path in ("", "/"):
            continue
        if parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS and parts.path in ("", "/"):
            continue
        raise ValueError(
            f"{service!r} is not a push service: give a host (https is implied), or an "
            "origin http://127.0.0.1:PORT for one on this box"
        )
    return services


def positive_number(value: Any) -> float:
    return _positive(value, float, "number")


def dollars(value: Any) -> float:
    """An amount in US dollars: 0 (nothing may be spent) or more, finite."""
    problem = ValueError(f"must be an amount in US dollars, 0 or more (5, 0.5), not {value!r}")
    if isinstance(value, bool):
        raise problem
    try:
        amount = float(value)
    except (TypeError, ValueError):
        raise problem from None
    if not math.isfinite(amount) or amount < 0:
        raise problem
    return amount


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


def count(value: Any) -> int:
    if value in (0, "0"):
        return 0
    return positive_int(value)


def setting_source_list(value: Any) -> tuple[str, ...]:
    sources = string_list(value) if value != [] else ()
    bad = [s for s in sources if s not in SETTING_SOURCES]
    if bad:
        raise ValueError(f"sources are {', '.join(SETTING_SOURCES)}, not {bad[0]!r}")
    return sources


def service_name(value: Any) -> str:
    """A Tailscale Service's name: `svc:` and a DNS label (svc:agents)."""
    text = nonempty_text(value).lower()
    if not re.fullmatch(r"svc:[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", text):
        raise ValueError(f"must be svc: and a DNS label, like svc:agents, not {value!r}")
    return text


def listen_address(value: Any) -> Listen:
    return parse_listen(nonempty_text(value))


def hostname(value: Any) -> str:
    text = nonempty_text(value).lower()
    if not re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", text):
        raise ValueError(
            f"must be a DNS label (letters, digits and inner hyphens, at most 63), not {value!r}"
        )
    return text


def http_url(value: Any) -> str:
    text = nonempty_text(value)
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"must be an http(s) URL, not {text!r}")
    return text.rstrip("/")


# Hops an actor chain may hold at most, whatever delegation.max_depth says: the header
# that carries it is bounded too (a token a hop).
MOST_HOPS = 16


def depth(value: Any) -> int:
    hops = positive_int(value)
    if hops > MOST_HOPS:
        raise ValueError(f"must be {MOST_HOPS} hops or fewer, not {hops}")
    return hops


def port(value: Any) -> int:
    number = positive_int(value)
    if number > 65535:
        raise ValueError(f"must be a port, 1 to 65535, not {number}")
    return number


def node_list(value: Any) -> tuple[str, ...]:
    """Tailnet nodes by tag ("tag:build"), short name ("devbox-1") or MagicDNS name
    ("devbox-1.tail.example.ts.net", a trailing dot dropped), lower case."""
    nodes = []
    for entry in string_list(value):
        text = entry.strip().lower().removesuffix(".")
        if text.startswith("tag:"):
            if not re.fullmatch(r"tag:[a-z0-9][a-z0-9-]*", text):
                raise ValueError(f"{entry!r} is not a tag such as tag:build")
        elif not re.fullmatch(
            r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*", text
        ):
            raise ValueError(
                f"a node is a tag (tag:build), a name (devbox-1) or a MagicDNS name, not {entry!r}"
            )
        nodes.append(text)
    return tuple(nodes)


def delegated_role_list(value: Any) -> tuple[str, ...]:
    """The roles a delegated request may get: never admin, which is the box's own."""
    roles = role_list(value)
    if "admin" in roles:
        raise ValueError(
            f"a delegated request acts for a person through another box: roles are "
            f"{', '.join(DELEGATED_ROLES)}, not 'admin'"
        )
    return roles


def proxy_url(value: Any) -> str:
    """An HTTP proxy (http://HOST:PORT), or "" for none."""
    if value == "":
        return ""
    url = http_url(value)
    if urlsplit(url).scheme != "http":
        raise ValueError(f"must be an http:// proxy such as http://127.0.0.1:1055, not {url!r}")
    return url
