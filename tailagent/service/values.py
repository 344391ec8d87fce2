"""How a value is written into a unit so that systemd reads back exactly it, and
which values cannot be: a unit is lines of `Key=value`, so a newline in a path
would start a line of its own (`ExecStartPre=` run as the service's user), and
each directive reads its value its own way (a word of a command line, a word of a
list, the rest of the line)."""

from __future__ import annotations

from collections.abc import Iterable

# Where a word must be quoted: systemd splits a command line or a list at white space,
# and reads quotes and backslashes as its own.
_QUOTED = frozenset(" \t\"'\\;")


def exec_word(text: str) -> str:
    """One word of ExecStart= as systemd reads it back: its specifiers (%) and
    variables ($) doubled, and quoted when it holds a space, a quote or a backslash
    (an agent command line is one word, however many it has itself)."""
    return list_word(text.replace("%", "%%").replace("$", "$$"))


def list_word(text: str) -> str:
    """One word of a space-separated list (ReadWritePaths=, Environment=, a command
    line), quoted when it must be, with its backslashes and quotes escaped; its % are
    the caller's (a literal one doubled, a specifier kept)."""
    if text and not any(c in _QUOTED for c in text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def unwritable(named: Iterable[tuple[str, str]], whole_lines: Iterable[str]) -> str:
    """Why one of the values (name, value) cannot go into a unit ("" when all can):
    a control character (C0, DEL, C1: a newline ends the line, NUL ends the file for
    some readers) or text that is not UTF-8 (systemd ignores such a line). The values
    named in `whole_lines` are the rest of their line, unquoted (WorkingDirectory=,
    User=, LoadCredential=): systemd strips white space at their ends and reads a
    backslash there as the line going on, so those cannot end in either."""
    lines = set(whole_lines)
    for name, value in named:
        control = next((c for c in value if _control(c)), None)
        if control is not None:
            return (
                f"{name} {value!r} holds a control character (U+{ord(control):04X}), "
                "which a unit cannot hold as it is: choose one without"
            )
        if any("\ud800" <= c <= "\udfff" for c in value):
            return f"{name} {value!r} is not UTF-8, which a unit must be: choose one that is"
        if name in lines and (value != value.strip() or value.endswith("\\")):
            return (
                f"{name} {value!r} begins or ends in white space or ends in a backslash, "
                "which systemd would not read back as it is: choose one without"
            )
    return ""


def _control(c: str) -> bool:
    """C0 controls (newline, carriage return, NUL, tab, escape...), DEL and C1."""
    return c < " " or "\x7f" <= c <= "\x9f"
