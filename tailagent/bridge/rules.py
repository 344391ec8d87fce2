"""Tool-use rules: decisions made before the caller is asked.

`[[rules]]` in the config, each a tool name pattern, optionally a command or path
glob, a decision (allow, deny, ask), and optionally the roles it applies to. The
first rule that matches a permission request decides; no match means the caller
is asked. They apply alike to Claude's prompts, ACP permission requests and
terminal/create, since all of them reach the bridge as the same event.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from tailagent.agents.events import PermissionAsked
from tailagent.tool_rules import Rule


def matches(rule: Rule, asked: PermissionAsked, roles: frozenset[str]) -> bool:
    if not fnmatchcase(asked.tool, rule.tool):
        return False
    if rule.roles and not (set(rule.roles) & roles):
        return False
    if rule.command is not None:
        command = asked.input.get("command")
        if not isinstance(command, str) or not fnmatchcase(command, rule.command):
            return False
    if rule.path is not None:
        path = asked.input.get("file_path") or asked.input.get("path")
        if not isinstance(path, str) or not fnmatchcase(path, rule.path):
            return False
    return True


def first_match(
    rules: tuple[Rule, ...], asked: PermissionAsked, roles: frozenset[str]
) -> Rule | None:
    return next((rule for rule in rules if matches(rule, asked, roles)), None)
