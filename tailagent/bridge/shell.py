"""A command line read as a shell reads it: tree-sitter's bash grammar, not a pattern.

Tool-use rules need two readings of a command. An allow rule may approve only a line
that is one simple command of plain words (`simple_command`): no operator, pipe,
substitution, expansion, redirection, here-doc, glob or newline, so that what the
rule's glob saw is exactly the program and arguments that will run. A deny (or ask)
rule should catch the command wherever it hides (`commands_within`): every simple
command in the line, in substitutions and here-doc bodies, inside `sh -c '…'`,
`eval`, `find -exec`, and after wrappers such as `env`, `sudo` or `timeout`.

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

Words = tuple[str, ...]

# Characters a shell expands in an unquoted word (pathname and brace expansion, the
# tilde): a word with one of them is not a plain word.
EXPANDING = frozenset("*?[]{}~$`")
# Programs that run another program named by a later word.
WRAPPERS = frozenset(
    ("env", "sudo", "doas", "nice", "ionice", "timeout", "nohup", "command", "exec",
     "builtin", "time", "stdbuf", "setsid", "xargs", "chrt", "taskset", "flock", "watch")
)  # fmt: skip
SHELLS = frozenset(("sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"))
OPERATORS = "();<>|&"
FIND_EXEC = frozenset(("-exec", "-execdir", "-ok", "-okdir"))
# How deep `sh -c` strings and here-docs are read into; deeper ones are not.
MAX_DEPTH = 4


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
def _parser() -> Parser:
    return Parser(Language(tree_sitter_bash.language()))


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
    root = _parser().parse(line.encode()).root_node
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
    """The script of `sh -c SCRIPT` (`-c` alone or in a cluster such as `-lc`), when
    those are all the words; a shell given more runs the same script."""
    if len(words) == 3 and os.path.basename(words[0]) in SHELLS:
        flag = words[1]
        if flag.startswith("-") and not flag.startswith("--") and "c" in flag:
            return words[2]
    return None


# --- every command a line could run, for deny rules ------------------------------------------


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


def _unwrapped(words: Words, depth: int) -> list[Words]:
    """`words` and the commands they run in turn: after leading assignments, after a
    wrapper (every later word is tried as the program: options are not known), the
    script of a shell's `-c`, `eval`'s words and `find -exec`'s command."""
    start = 0
    while start < len(words) and _is_assignment(words[start]):
        start += 1
    found = [words] if start == 0 else [words, words[start:]]
    words = words[start:]
    if not words:
        return found
    program = os.path.basename(words[0])
    if program in WRAPPERS:
        for index in range(1, len(words)):
            if not words[index].startswith("-") and not _is_assignment(words[index]):
                found.extend(_unwrapped_once(words[index:], depth))
    else:
        found.extend(_unwrapped_once(words, depth)[1:])
    return found


def _unwrapped_once(words: Words, depth: int) -> list[Words]:
    """`words`, plus what a shell, `eval` or `find -exec` among them runs (no wrapper)."""
    found = [words]
    program = os.path.basename(words[0])
    if depth < MAX_DEPTH and program in SHELLS:
        for index, word in enumerate(words[1:-1], 1):
            if word.startswith("-") and not word.startswith("--") and "c" in word:
                found.extend(reading(words[index + 1], depth + 1).commands)
                break
    elif depth < MAX_DEPTH and program == "eval":
        found.extend(reading(" ".join(words[1:]), depth + 1).commands)
    elif program == "find":
        for index, word in enumerate(words):
            if word in FIND_EXEC and index + 1 < len(words):
                tail = words[index + 1 :]
                end = next((i for i, w in enumerate(tail) if w in (";", "+")), len(tail))
                if end:
                    found.extend(_unwrapped(tail[:end], depth))
    return found


def reading(line: str, depth: int = 0) -> Reading:
    """Every simple command in `line` (in lists, pipelines, subshells, substitutions,
    functions, here-doc bodies), each with what it runs in turn; too much rather than
    too little, since only deny and ask rules read it."""
    root = _parser().parse(line.encode()).root_node
    found: list[Words] = []
    targets: list[str] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "command":
            if words := _command_words(node):
                found.append(words)
        elif node.type == "file_redirect" and node.named_children:
            targets.append(_value(node.named_children[-1]))
        elif node.type in ("heredoc_body", "herestring_redirect") and depth < MAX_DEPTH:
            body = node.named_children[-1] if node.type == "herestring_redirect" else node
            found.extend(reading(_value(body), depth + 1).commands)
        stack.extend(reversed(node.children))
    if root.has_error:
        found.extend(_rough(line))
    commands = [unwrapped for words in found for unwrapped in _unwrapped(words, depth)]
    return Reading(tuple(dict.fromkeys(commands)), tuple(targets))


def commands_within(line: str) -> tuple[Words, ...]:
    return reading(line).commands
