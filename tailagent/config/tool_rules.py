"""Tool-use rules as the configuration states them (`[[rules]]`): each a tool name
pattern, optionally a command or path glob, a decision (allow, deny, ask) and the
roles it applies to.

Read with the settings, below the bridge that applies them (`bridge/rules/matching.py`).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Literal

Decision = Literal["allow", "deny", "ask"]
RULE_KEYS = {"tool", "command", "path", "decision", "roles"}


@dataclass(frozen=True, slots=True)
class CommandPattern:
    """A rule's `command` read as words, as a shell would read them: the first is the
    program, matched as a whole word ("" for any program), and the rest a glob over
    the command's arguments joined by single spaces. A `*` glued to the program
    stands for the arguments: `pytest*` is `pytest *`, which `pytest-evil` is not;
    to an allow rule one glued to the last word after a letter or digit stands for
    the words after it too: `git status*` is not `git statusx` (`bridge/rules/matching.py`)."""

    program: str
    arguments: str


def command_pattern(text: str) -> CommandPattern:
    """Raises ValueError saying what is wrong with the glob."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"`command` is not words a shell could read ({exc})") from None
    if not words:
        raise ValueError("`command` is empty: leave it out to match any command")
    program, arguments = words[0], words[1:]
    if program == "*":  # any program; alone, with any arguments
        program, arguments = "", arguments or ["*"]
    elif program.endswith("*"):
        program, arguments = program[:-1], ["*", *arguments]
    if set(program) & set("*?[]"):
        raise ValueError(
            f"`command`'s first word {words[0]!r} is the program, matched as a whole word: "
            "write it without *, ? or [ (a * at its end stands for the arguments, "
            "and * alone for any program)"
        )
    return CommandPattern(program, " ".join(arguments))


@dataclass(frozen=True, slots=True)
class Rule:
    number: int
    tool: str
    decision: Decision
    command: str | None = None
    path: str | None = None
    roles: tuple[str, ...] = ()
    pattern: CommandPattern | None = None  # `command` as words (`command_pattern`)

    def describe(self) -> str:
        parts = [f"rule {self.number}: {self.decision} {self.tool}"]
        if self.command:
            parts.append(f"command {self.command!r}")
        if self.path:
            parts.append(f"path {self.path!r}")
        if self.roles:
            parts.append(f"for {', '.join(self.roles)}")
        return " ".join(parts)


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
        command = table.get("command")
        try:
            pattern = None if command is None else command_pattern(command)
        except ValueError as exc:
            raise ValueError(f"rule {number}: {exc}") from None
        rules.append(
            Rule(number, tool, decision, command, table.get("path"), tuple(roles), pattern)
        )
    return tuple(rules)
