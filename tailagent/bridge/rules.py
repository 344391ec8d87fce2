"""Tool-use rules: decisions made before the caller is asked.

`[[rules]]` in the config, each a tool name pattern, optionally a command or path
glob, a decision (allow, deny, ask), and optionally the roles it applies to. The
first rule that matches a permission request decides; no match means the caller
is asked. They apply alike to Claude's prompts, ACP permission requests and
terminal/create, since all of them reach the bridge as the same event.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

from tailagent.agents.events import PermissionAsked

Decision = Literal["allow", "deny", "ask"]
RULE_KEYS = {"tool", "command", "path", "decision", "roles"}


@dataclass(frozen=True, slots=True)
class Rule:
    number: int
    tool: str
    decision: Decision
    command: str | None = None
    path: str | None = None
    roles: tuple[str, ...] = ()

    def describe(self) -> str:
        parts = [f"rule {self.number}: {self.decision} {self.tool}"]
        if self.command:
            parts.append(f"command {self.command!r}")
        if self.path:
            parts.append(f"path {self.path!r}")
        if self.roles:
            parts.append(f"for {', '.join(self.roles)}")
        return " ".join(parts)

    def matches(self, asked: PermissionAsked, roles: frozenset[str]) -> bool:
        if not fnmatchcase(asked.tool, self.tool):
            return False
        if self.roles and not (set(self.roles) & roles):
            return False
        if self.command is not None:
            command = asked.input.get("command")
            if not isinstance(command, str) or not fnmatchcase(command, self.command):
                return False
        if self.path is not None:
            path = asked.input.get("file_path") or asked.input.get("path")
            if not isinstance(path, str) or not fnmatchcase(path, self.path):
                return False
        return True


def parse_rules(value: Any) -> tuple[Rule, ...]:
    """The `[[rules]]` tables; raises ValueError naming the rule and what is wrong."""
    if not isinstance(value, list):
        raise ValueError("rules are [[rules]] tables in the config file")
    rules = []
    for number, table in enumerate(value, 1):
        if not isinstance(table, dict):
            raise ValueError(f"rule {number} is not a table")
        unknown = set(table) - RULE_KEYS
        if unknown:
            raise ValueError(f"rule {number}: unknown key {sorted(unknown)[0]!r}")
        tool, decision = table.get("tool"), table.get("decision")
        if not isinstance(tool, str) or not tool:
            raise ValueError(f"rule {number}: `tool` (a name or a pattern) is required")
        if decision not in ("allow", "deny", "ask"):
            raise ValueError(f"rule {number}: `decision` must be allow, deny or ask")
        roles = table.get("roles", [])
        if not isinstance(roles, list) or not all(
            r in ("caller", "approver", "admin") for r in roles
        ):
            raise ValueError(f"rule {number}: `roles` are caller, approver, admin")
        for key in ("command", "path"):
            if key in table and not isinstance(table[key], str):
                raise ValueError(f"rule {number}: `{key}` must be a glob string")
        rules.append(
            Rule(number, tool, decision, table.get("command"), table.get("path"), tuple(roles))
        )
    return tuple(rules)


def first_match(
    rules: tuple[Rule, ...], asked: PermissionAsked, roles: frozenset[str]
) -> Rule | None:
    return next((rule for rule in rules if rule.matches(asked, roles)), None)
