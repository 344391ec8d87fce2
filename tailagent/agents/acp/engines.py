"""The Node.js version an npm agent declares it needs (its package.json `engines.node`),
and whether this box's `node` is one: an adapter built for Node 22 fails on Node 20 in
ways that do not say so (a missing global, a syntax error deep in a dependency).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from tailagent.agents.acp.install import COMPLETE, _folder_name, agents_dir

NODE_TIMEOUT = 5.0  # seconds
_COMPARATOR = re.compile(r"(>=|<=|>|<|=|\^|~)?\s*v?(\d+|[xX*])(?:\.(\d+|[xX*]))?(?:\.(\d+|[xX*]))?")
Version = tuple[int, int, int]


def declared_node(package: str, version: str | None) -> tuple[str, Path] | None:
    """`package`'s `engines.node` and the package.json that says it: the version installed
    for fenced agents (the pinned one, else the newest), else the newest npx fetched."""
    if version:
        candidates = [agents_dir() / _folder_name(package, version)]
    else:
        prefix = _folder_name(package, "")
        candidates = sorted(agents_dir().glob(prefix + "*"), key=lambda p: p.stat().st_mtime)
        candidates.reverse()
    manifests = [p / "node_modules" / package / "package.json"
                 for p in candidates if (p / COMPLETE).exists()]  # fmt: skip
    npx = Path.home() / ".npm" / "_npx"
    fetched = npx.glob(f"*/node_modules/{package}/package.json") if npx.is_dir() else []
    manifests += sorted(fetched, key=lambda p: p.stat().st_mtime, reverse=True)
    for manifest in manifests:
        try:
            engines = json.loads(manifest.read_text()).get("engines") or {}
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(engines, dict) and isinstance(engines.get("node"), str):
            return engines["node"], manifest
        return None  # the newest says nothing: nothing is asked
    return None


def node_version() -> str | None:
    """`node --version` without its `v`, or None when there is no node that answers.
    Outside any sandbox: `doctor` asks the box's own node, no agent's code runs."""
    node = shutil.which("node")
    if node is None:
        return None
    try:
        done = subprocess.run([node, "--version"], capture_output=True, text=True,
                              timeout=NODE_TIMEOUT, stdin=subprocess.DEVNULL)  # fmt: skip
    except (subprocess.TimeoutExpired, OSError):
        return None
    return done.stdout.strip().removeprefix("v") or None if done.returncode == 0 else None


def _bounds(op: str, parts: list[str]) -> list[tuple[str, Version]]:
    """One comparator as plain `>=`/`<`/`>`/`<=` bounds (x and missing parts as ranges)."""
    given = [int(p) for p in parts if p.isdigit()]
    exact = len(given) == 3
    low = [*given, 0, 0, 0][:3]
    lower: Version = (low[0], low[1], low[2])
    if op in (">", "<="):
        if exact:
            return [(op, lower)]
        op = ">=" if op == ">" else "<"
        lower = _next(given)
    if op in (">=", "<"):
        return [(op, lower)]
    if not given:
        return []
    if op == "^":
        first = next((i for i, n in enumerate(given) if n), len(given) - 1)
        return [(">=", lower), ("<", _next(given[: first + 1]))]
    if op == "~":
        return [(">=", lower), ("<", _next(given[:2] if len(given) > 1 else given))]
    return [("=", lower)] if exact else [(">=", lower), ("<", _next(given))]


def _next(given: list[int]) -> Version:
    """The first version past every one that starts with `given`."""
    bumped = [*given[:-1], given[-1] + 1, 0, 0][:3]
    return (bumped[0], bumped[1], bumped[2])


def satisfies(version: str, spec: str) -> bool | None:
    """Whether `version` (MAJOR.MINOR.PATCH) is in the npm range `spec`; None for what
    this does not read (a hyphen range, a prerelease tag)."""
    parts = version.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        return None
    have: Version = (int(parts[0]), int(parts[1]), int(parts[2]))
    checks = {">=": have.__ge__, ">": have.__gt__, "<": have.__lt__, "<=": have.__le__,
              "=": have.__eq__}  # fmt: skip
    for alternative in spec.split("||"):
        if " - " in alternative or re.search(r"\d-", alternative):
            return None
        found = [(m.group(1) or "=", [g for g in m.groups()[1:] if g])
                 for m in _COMPARATOR.finditer(alternative)]  # fmt: skip
        bounds = [bound for op, given in found for bound in _bounds(op, given)]
        if all(checks[op](bound) for op, bound in bounds):
            return True
    return False
