"""A command line read as a shell reads it: tree-sitter's bash grammar, not a pattern.

Tool-use rules need two readings of a command. An allow rule may approve only a line
that is one simple command of plain words (`simple_command`): no operator, pipe,
substitution, expansion, redirection, here-doc, glob or newline, so that what the
rule's glob saw is exactly the program and arguments that will run. A deny (or ask)
rule should catch the command wherever it hides (`reading`): every simple
command in the line, in substitutions and here-doc bodies, inside `sh -c '…'`,
`eval`, `find -exec`, and after wrappers such as `env`, `sudo` or `flock -c` (what
each program runs is `programs`'s to know).

tree-sitter-bash is a maintained grammar of bash (MIT, as tree-sitter is) with wheels
that carry the compiled parser; what it cannot parse is marked as an error, which
makes a line unapprovable. `shlex` splits words but keeps no record of quoting, and
bashlex is GPL.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from functools import cache

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from tailagent.bridge.rules.programs import command_lines, is_shell, runs_of, trusted_shell

Words = tuple[str, ...]

# Characters a shell expands in an unquoted word (pathname and brace expansion, the
# tilde): a word with one of them is not a plain word.
EXPANDING = frozenset("*?[]{}~$`")
OPERATORS = "();<>|&"
FIND_EXEC = frozenset(("-exec", "-execdir", "-ok", "-okdir"))
# The bounds of a reading for deny rules (`reading`); a line past them is asked.
MAX_DEPTH = 4  # `sh -c` scripts, here-docs and `find -exec` within each other
MAX_COMMANDS = 256  # simple commands and the ones they run (wrappers count each word)
MAX_LINE = 65536  # characters
MAX_PARSED = 4 * MAX_LINE  # characters parsed in all, the line and the lines within it
MAX_SCANNED = MAX_LINE // 2  # words looked through for the lines programs hand a shell


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """One simple command of plain words: `NAME=value` assignments, then the words."""

    assignments: tuple[tuple[str, str], ...]
    words: Words


@dataclass(frozen=True, slots=True)
class Reading:
    """What a deny rule looks at in a line: the simple commands a shell could run from
    it (each also unwrapped), and the targets of its redirections."""

    commands: tuple[Words, ...]
    targets: tuple[str, ...]


@cache
def _bash() -> Language:
    return Language(tree_sitter_bash.language())


def _parse(line: str) -> Node:
    """The root of `line`'s syntax tree. A parser of its own each time (a few
    microseconds): a tree-sitter parser is not to be shared between threads."""
    return Parser(_bash()).parse(line.encode()).root_node


def _text(node: Node) -> str:
    return (node.text or b"").decode(errors="replace")


def _unescape(text: str, escapable: str | None) -> str:
    """Backslash escapes removed: any character's outside quotes (`escapable` None),
    only those of `escapable` inside double quotes."""
    out, i = [], 0
    while i < len(text):
        following = text[i + 1] if i + 1 < len(text) else ""
        if text[i] == "\\" and following and (escapable is None or following in escapable):
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _literal(node: Node) -> str | None:
    """The value of a word the shell takes as it is (after quote removal), or None when
    the shell would expand or substitute something in it."""
    kind = node.type
    if kind in ("word", "number"):
        text = _text(node)
        if EXPANDING & set(text) or text.startswith("="):  # zsh expands `=name` to a path
            return None
        return _unescape(text, None)
    if kind == "raw_string":
        return _text(node)[1:-1]
    if kind == "string":
        parts = []
        for child in node.children:
            if child.type == "string_content":
                parts.append(_unescape(_text(child), '$`"\\\n'))
            elif child.type != '"':
                return None
        return "".join(parts)
    if kind == "concatenation":
        values = [_literal(child) for child in node.children]
        return None if None in values else "".join(v for v in values if v is not None)
    return None


def _assignment(node: Node) -> tuple[str, str] | None:
    kinds = [child.type for child in node.children]
    if kinds[:2] != ["variable_name", "="] or len(kinds) > 3:
        return None  # an array element, `+=`
    value = _literal(node.children[2]) if len(kinds) == 3 else ""
    return None if value is None else (_text(node.children[0]), value)


def simple_command(line: str) -> SimpleCommand | None:
    """The line as one simple command of plain words; None when it is anything else,
    or when the parser finds an error in it."""
    if any((ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F for c in line):
        return None  # a newline separates commands; other control characters hide
    root = _parse(line)
    if root.has_error or len(root.children) != 1 or root.children[0].type != "command":
        return None
    assignments: list[tuple[str, str]] = []
    words: list[str] = []
    for child in root.children[0].children:
        if child.type == "variable_assignment" and not words:
            pair = _assignment(child)
            if pair is None:
                return None
            assignments.append(pair)
            continue
        if child.type == "command_name" and len(child.children) != 1:
            return None
        value = _literal(child.children[0] if child.type == "command_name" else child)
        if value is None:
            return None
        words.append(value)
    return SimpleCommand(tuple(assignments), tuple(words)) if words else None


def shell_script(words: Words) -> str | None:
    """The script of `SH -c SCRIPT` or `SH -c -- SCRIPT`, when those are all the words
    and SH is a shell that only root could have put where it is
    (`programs.trusted_shell`); None for anything else."""
    plain = words[1:] in (("-c", words[-1]), ("-c", "--", words[-1]))
    return words[-1] if len(words) > 2 and plain and trusted_shell(words[0]) else None


def shell_given_options(words: Words) -> bool:
    """Whether `words` run a program named as a shell (in any directory: it may be one)
    with an option first. Beyond `shell_script`'s form such a line is unclear to an
    allow rule: `-k` puts a script's `NAME=value` words into the environment, `-i` and
    `-l` read startup files, `--rcfile` and `-o` take values that look like scripts."""
    return len(words) > 1 and is_shell(words[0]) and words[1][:1] in ("-", "+")


# --- every command a line could run, for deny rules ------------------------------------------


class TooIntricate(Exception):
    """More commands, or deeper nesting, than a reading follows: nothing is promised."""


def _value(node: Node) -> str:
    """A word's value when it is plain, else its text as written (`$HOME`, `$(…)`)."""
    literal = _literal(node)
    return _text(node) if literal is None else literal


def _command_words(node: Node) -> Words:
    words: list[str] = []
    for child in node.children:
        if child.type == "variable_assignment":
            continue
        if child.type == "command_name":
            words.extend(_value(c) for c in child.children)
        elif child.is_named and child.type != "comment" and not child.type.endswith("_redirect"):
            words.append(_value(child))
    return tuple(words)


def _rough(line: str) -> list[Words]:
    """A line the grammar cannot read, cut at newlines and at runs of operator
    characters: by shlex, or (a quote left open) at every such character."""
    found: list[Words] = []
    for part in line.splitlines():
        lexer = shlex.shlex(part, posix=True, punctuation_chars=OPERATORS)
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError:
            tokens = "".join(f" {c} " if c in OPERATORS else c for c in part).split()
        current: list[str] = []
        for token in [*tokens, ";"]:
            if set(token) <= set(OPERATORS):
                if current:
                    found.append(tuple(current))
                current = []
            else:
                current.append(token)
    return found


def _is_assignment(word: str) -> bool:
    name, equals, _ = word.partition("=")
    return bool(equals) and name.isidentifier()


class _Reader:
    """One reading of a line: the commands found so far, within the bounds."""

    def __init__(self) -> None:
        self.commands: dict[Words, None] = {}
        self.targets: list[str] = []
        self.parsed = 0  # characters handed to the parser
        self.scanned = 0  # words looked through by `runs`

    def add(self, words: Words) -> None:
        self.commands[words] = None
        if len(self.commands) > MAX_COMMANDS:
            raise TooIntricate(f"more than {MAX_COMMANDS} commands")

    def line(self, line: str, depth: int) -> None:
        """Every simple command in `line` (in lists, pipelines, subshells,
        substitutions, functions, here-doc bodies), each with what it runs in turn."""
        if depth > MAX_DEPTH:
            raise TooIntricate(f"commands within commands, more than {MAX_DEPTH} deep")
        self.parsed += len(line)
        if self.parsed > MAX_PARSED:
            raise TooIntricate(f"more than {MAX_PARSED} characters to parse")
        root = _parse(line)
        found: list[Words] = []
        stack = [root]
        while stack:
            node = stack.pop()
            if node.type == "command":
                if words := _command_words(node):
                    found.append(words)
            elif node.type == "file_redirect" and node.named_children:
                self.targets.append(_value(node.named_children[-1]))
            elif node.type == "heredoc_body":
                self.line(_value(node), depth + 1)
            elif node.type == "herestring_redirect" and node.named_children:
                self.line(_value(node.named_children[-1]), depth + 1)
            stack.extend(reversed(node.children))
        if root.has_error:
            found.extend(_rough(line))
        for words in found:
            self.command(words, depth)

    def command(self, words: Words, depth: int) -> None:
        """`words` and what they run in turn: after leading assignments; after a
        program that execs its arguments (a wrapper such as `sudo`, a shell's
        `"$@"`), every later word tried as the program, since its options are not
        known; and the lines and commands `runs` finds in each of those."""
        self.add(words)
        start = 0
        while start < len(words) and _is_assignment(words[start]):
            start += 1
        if start == len(words):
            return
        words = words[start:]
        self.add(words)
        how = runs_of(words[0])
        if how is not None and how.argv:
            for index in range(1, len(words)):
                if not words[index].startswith("-") and not _is_assignment(words[index]):
                    self.add(words[index:])
                    self.runs(words[index:], depth)
        self.runs(words, depth)

    def runs(self, words: Words, depth: int) -> None:
        """The command lines the program named first in `words` hands a shell (a
        shell's script, `flock -c`'s, `eval`'s words, …), and `find -exec`'s command.
        What it execs from its later words is `command`'s to try."""
        how = runs_of(words[0])
        if how is not None and how.hands_lines:
            self.scanned += len(words)
            if self.scanned > MAX_SCANNED:
                raise TooIntricate(f"more than {MAX_SCANNED} words to look through")
        for line in dict.fromkeys(command_lines(words)):
            self.line(line, depth + 1)
        if os.path.basename(words[0]) == "find":
            index = 1
            while index < len(words):
                if words[index] not in FIND_EXEC:
                    index += 1
                    continue
                tail = words[index + 1 :]
                end = next((i for i, w in enumerate(tail) if w in (";", "+")), len(tail))
                if end:
                    if depth >= MAX_DEPTH:
                        raise TooIntricate(f"find within find, more than {MAX_DEPTH} deep")
                    self.command(tail[:end], depth + 1)
                index += end + 2


def reading(line: str) -> Reading:
    """Every command a shell could run from `line`: too much rather than too little,
    since only deny and ask rules read it. Raises TooIntricate past the bounds (a
    line over MAX_LINE characters, MAX_COMMANDS commands, MAX_DEPTH levels)."""
    if len(line) > MAX_LINE:
        raise TooIntricate(f"longer than {MAX_LINE} characters")
    reader = _Reader()
    reader.line(line, 0)
    return Reading(tuple(reader.commands), tuple(reader.targets))
