"""Tool-use rules: decisions made before the caller is asked.

`[[rules]]` in the config, each a tool name pattern, optionally a command or path
glob, a decision (allow, deny, ask), and optionally the roles it applies to. The
first rule that matches a permission request decides; no match means the caller
is asked. They apply alike to Claude's prompts, ACP permission requests and
terminal/create, since all of them reach the bridge as the same event.

An allow rule approves narrowly, and deny and ask rules catch broadly, because a
wrong allow runs something nobody approved while a wrong deny or ask only costs a
question. So an allow rule matches only a command that is one simple command of
plain words (`shell.simple_command`), run with no environment beyond `HARMLESS_ENV`,
whose paths all lie in the workspace, its last word as a whole word; it reads into a
shell's script only for a shell at a trusted path given a plain `-c`, and a shell
given anything else is asked whatever the rules say. A deny or ask rule matches when
any command a shell could run from the line matches (`shell.reading`, through every
wrapper `programs` knows), or any form of any path.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import cached_property
from pathlib import Path
from typing import Any

from tailagent.agents.events import PermissionAsked
from tailagent.bridge.rules.programs import same_flag
from tailagent.bridge.rules.shell import (
    Reading,
    SimpleCommand,
    TooIntricate,
    Words,
    reading,
    shell_given_options,
    shell_script,
)
from tailagent.bridge.rules.shell import simple_command as parse_simple
from tailagent.config.tool_rules import CommandPattern, Rule

# Variables an approved command may set: none of them names a program to run, a file
# to load code or configuration from, or a place to look for either (GIT_CONFIG_*,
# LD_PRELOAD, PATH, PYTHONPATH, PAGER, BASH_ENV do).
HARMLESS_ENV = frozenset(
    ("TERM", "COLORTERM", "NO_COLOR", "FORCE_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "COLUMNS",
     "LINES", "LANG", "LANGUAGE", "TZ", "CI", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE")
)  # fmt: skip
HARMLESS_ENV_PREFIX = "LC_"
# Input keys naming a file or directory, in any agent's tool input, at any depth:
# Claude Code's (file_path, notebook_path, path), Gemini CLI's (absolute_path, dir_path,
# directory, paths), Codex's (cwd, grant_root, move_path, and the keys of `changes`).
PATH_KEYS = frozenset(
    ("file_path", "path", "notebook_path", "absolute_path", "dir_path", "directory", "filePath",
     "target_file", "move_path", "grant_root", "cwd")
)  # fmt: skip
PATH_LIST_KEYS = frozenset(("paths", "file_paths"))
PATH_MAP_KEYS = frozenset(("changes",))
WORKING_DIRECTORY = "cwd"  # a place the command runs in, not a file a path glob names
FLAG_CLUSTER = re.compile(r"-[A-Za-z]+")
MAX_INPUT_DEPTH = 8


def harmless(name: str) -> bool:
    return name in HARMLESS_ENV or name.startswith(HARMLESS_ENV_PREFIX)


# --- paths ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Place:
    """A path an agent named, in every form a rule may match: absolute with `.`, `..`
    and `//` resolved as written, and with symlinks resolved too; relative to the
    workspace as well when both lie inside it (`relative` is None when not)."""

    absolute: tuple[str, ...]
    relative: tuple[str, ...] | None
    names_a_file: bool = True  # False for a working directory

    @property
    def forms(self) -> tuple[str, ...]:
        return self.absolute + (self.relative or ())


def _lexical(path: str) -> str:
    normal = os.path.normpath(path)
    return normal[1:] if normal.startswith("//") else normal  # POSIX keeps a leading //


def _within(path: str, root: str) -> str | None:
    if path == root:
        return "."
    prefix = root if root.endswith("/") else root + "/"
    return path[len(prefix) :] if path.startswith(prefix) else None


@dataclass(frozen=True, slots=True)
class Workspace:
    """The directory the agent works in (a conversation's worktree, or the workspace),
    in both the forms its paths are compared in."""

    lexical: str
    real: str

    @classmethod
    def of(cls, root: Path) -> Workspace:
        return cls(_lexical(os.path.abspath(root)), os.path.realpath(root))

    def place(self, path: str, base: str | None = None, names_a_file: bool = True) -> Place:
        joined = os.path.join(base or self.lexical, os.path.expanduser(path))
        lexical = _lexical(joined)
        try:
            real = os.path.realpath(joined)
        except ValueError:  # a NUL in the path: no file has that name
            return Place((lexical,), None, names_a_file)
        inside = _within(lexical, self.lexical), _within(real, self.real)
        relative = None if None in inside else tuple(r for r in inside if r is not None)
        return Place((lexical, real), relative, names_a_file)


def _named_paths(value: Any, depth: int = 0) -> Iterator[tuple[str, str]]:
    """(key, path) for every path-like value in a tool input, at any depth."""
    if depth > MAX_INPUT_DEPTH:
        return
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if key in PATH_KEYS and isinstance(item, str):
            yield key, item
        elif (key in PATH_LIST_KEYS and isinstance(item, list)) or (
            key in PATH_MAP_KEYS and isinstance(item, dict)  # a map's keys are its paths
        ):
            yield from ((key, p) for p in item if isinstance(p, str))
        if isinstance(item, dict | list):
            yield from _named_paths(item, depth + 1)


def _looks_like_path(word: str) -> bool:
    return "/" in word or word.startswith(("~", "."))


# --- what rules see of a request -------------------------------------------------------------


def _command_line(value: Any) -> str | None:
    """The command as one line: a string as it is, an argv list (Codex, terminals)
    quoted word by word; None for anything else."""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(w, str) for w in value):
        return shlex.join(value)
    return None


def _env_names(value: Any) -> tuple[str, ...]:
    """The names an `env` input sets: a mapping, or ACP's list of {name, value}."""
    if isinstance(value, dict):
        return tuple(str(k) for k in value)
    if isinstance(value, list):
        return tuple(str(v.get("name")) if isinstance(v, dict) else "?" for v in value)
    return () if value is None else ("?",)


@dataclass(frozen=True)
class Seen:
    """A permission request as the rules see it, read once for all of them."""

    tool: str
    has_command: bool
    # The command as one simple command, and the script of its `sh -c` if that is one
    # too (setting only harmless variables); empty when the command is anything else,
    # a shell given options its script included (`shell.shell_given_options`), unless
    # they are a trusted shell's plain `-c` and that script is one.
    simple: tuple[SimpleCommand, ...]
    reading: Reading | None
    env: tuple[str, ...]
    inputs: tuple[Place, ...]  # the paths the input names
    workspace: Workspace
    base: str | None  # the command's working directory, if the input names one
    intricate: str | None = None  # why the command could not be read in full

    @classmethod
    def of(cls, asked: PermissionAsked, root: Path) -> Seen:
        workspace = Workspace.of(root)
        named = list(_named_paths(asked.input))
        inputs = tuple(workspace.place(p, None, k != WORKING_DIRECTORY) for k, p in named)
        cwd = next((p for k, p in named if k == WORKING_DIRECTORY), None)
        base = workspace.place(cwd).absolute[0] if cwd is not None else None
        line = _command_line(asked.input.get("command"))
        simple: list[SimpleCommand] = []
        read, intricate = None, None
        if line is not None:
            if (outer := parse_simple(line)) is not None:
                script = shell_script(outer.words)
                inner = parse_simple(script) if script is not None else None
                if inner is not None and all(harmless(n) for n, _ in inner.assignments):
                    simple += [outer, inner]
                elif not shell_given_options(outer.words):
                    simple.append(outer)  # a shell's unclear script leaves `simple` empty
            try:
                read = reading(line)
            except TooIntricate as exc:
                intricate = str(exc)
        return cls(
            asked.tool, "command" in asked.input, tuple(simple), read,
            _env_names(asked.input.get("env")), inputs, workspace, base, intricate,
        )  # fmt: skip

    @cached_property
    def mentioned(self) -> tuple[Place, ...]:
        """The words of the command that look like paths (also after a `=`), for the
        path globs of deny and ask rules only: read when one asks."""
        if self.reading is None:
            return ()
        words = [w for c in self.reading.commands for w in c] + list(self.reading.targets)
        parts = dict.fromkeys(p for w in words for p in (w, w.partition("=")[2]))
        return tuple(self.workspace.place(p, self.base) for p in parts if _looks_like_path(p))

    @property
    def approvable(self) -> bool:
        """Whether any allow rule may approve it: one simple command (if a command at
        all) setting only harmless variables, and every path it names in the workspace."""
        if self.has_command and not self.simple:
            return False
        assignments = [name for name, _ in self.simple[0].assignments] if self.simple else []
        if not all(harmless(name) for name in [*self.env, *assignments]):
            return False
        return all(place.relative is not None for place in self.inputs)


# --- matching ---------------------------------------------------------------------------------


def _program_is(pattern: CommandPattern, program: str, *, loosely: bool) -> bool:
    if not pattern.program:
        return True
    return program == pattern.program or (loosely and os.path.basename(program) == pattern.program)


def _flag_letters(program: str, words: list[str] | Words) -> tuple[set[str], list[str]]:
    """The letters of single-letter flag clusters (`-rf`, `-r -f`), each as the letter
    `program` documents it the same as (rm's `-R` and `--recursive` are `-r`), and the
    other words; words after `--` are never flags."""
    letters: set[str] = set()
    rest: list[str] = []
    for index, word in enumerate(words):
        if word == "--":
            rest.extend(words[index:])
            break
        if FLAG_CLUSTER.fullmatch(word):
            letters |= {same_flag(program, letter) for letter in word[1:]}
        elif word.startswith("--") and len(letter := same_flag(program, word)) == 1:
            letters.add(letter)
        else:
            rest.append(word)
    return letters, rest


def _pattern_flags(program: str, arguments: str) -> tuple[set[str], str]:
    """A rule's flag clusters as letters and the rest of its glob: `-rf*` is `-rf *`."""
    words: list[str] = []
    for word in arguments.split(" "):
        if word.endswith("*") and FLAG_CLUSTER.fullmatch(word[:-1]):
            words += [word[:-1], "*"]
        else:
            words.append(word)
    letters, rest = _flag_letters(program, words)
    return letters, " ".join(rest)


def _arguments_approved(glob: str, arguments: Words) -> bool:
    """The arguments joined by single spaces match the glob, where a `*` glued to the
    end of its last word after a letter or digit stands for the words after it, as it
    does after the program: `status*` is `status` alone or `status *`, not `statusx`.
    After any other character it is the word's (`tests/*`, `test:*`)."""
    joined = " ".join(arguments)
    if len(glob) > 1 and glob.endswith("*") and glob[-2].isalnum():
        return fnmatchcase(joined, glob[:-1]) or fnmatchcase(joined, glob[:-1] + " *")
    return fnmatchcase(joined, glob)


def approves(pattern: CommandPattern, words: Words) -> bool:
    """The program is the rule's, word for word; its arguments match the rule's glob,
    its last word as a whole word (`_arguments_approved`)."""
    return _program_is(pattern, words[0], loosely=False) and _arguments_approved(
        pattern.arguments, words[1:]
    )


def catches(pattern: CommandPattern, words: Words) -> bool:
    """More than `approves`: the program by its name without a directory, the glob
    over the arguments as written (`status*` has `statusx`), and flag clusters as sets
    of letters (`-fr`, `-r -f` and `-rfv` all have the rule's `-rf`; rm's `-Rf` too)."""
    if not words or not _program_is(pattern, words[0], loosely=True):
        return False
    if fnmatchcase(" ".join(words[1:]), pattern.arguments):
        return True
    program = pattern.program or words[0]
    wanted, glob = _pattern_flags(program, pattern.arguments)
    letters, rest = _flag_letters(words[0], words[1:])
    return bool(wanted) and wanted <= letters and fnmatchcase(" ".join(rest), glob)


def _path_glob(glob: str) -> str:
    return _lexical(os.path.expanduser(glob))


def _path_approved(glob: str, place: Place) -> bool:
    """Every form of the path matches: absolute ones for an absolute glob, else the
    ones relative to the workspace."""
    forms = place.absolute if glob.startswith("/") else place.relative or ()
    return bool(forms) and all(fnmatchcase(form, glob) for form in forms)


def _allows(rule: Rule, seen: Seen) -> bool:
    if not seen.approvable:
        return False
    if rule.pattern is not None and not any(approves(rule.pattern, s.words) for s in seen.simple):
        return False
    if rule.path is not None:
        glob = _path_glob(rule.path)
        files = [place for place in seen.inputs if place.names_a_file]
        if not files or not all(_path_approved(glob, place) for place in files):
            return False
    return True


def _catches(rule: Rule, seen: Seen) -> bool:
    if rule.pattern is not None:
        commands = seen.reading.commands if seen.reading is not None else ()
        if not any(catches(rule.pattern, words) for words in commands):
            return False
    if rule.path is not None:
        glob = _path_glob(rule.path)
        places = seen.inputs + seen.mentioned
        if not any(fnmatchcase(form, glob) for place in places for form in place.forms):
            return False
    return True


def matches(rule: Rule, seen: Seen, roles: frozenset[str]) -> bool:
    if not fnmatchcase(seen.tool, rule.tool):
        return False
    if rule.roles and not (set(rule.roles) & roles):
        return False
    return _allows(rule, seen) if rule.decision == "allow" else _catches(rule, seen)


def first_match(
    rules: tuple[Rule, ...], asked: PermissionAsked, roles: frozenset[str], root: Path
) -> Rule | None:
    """The rule that decides `asked`, whose paths are relative to `root`, the
    directory the agent works in."""
    if not rules:
        return None
    seen = Seen.of(asked, root)
    if seen.intricate is not None:
        return None  # too much to read in full: no rule may speak for a person
    return next((rule for rule in rules if matches(rule, seen, roles)), None)
