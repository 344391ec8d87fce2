"""What a reading of a command line knows of programs by their names: which are shells,
which run another program or a command line from their arguments, where a shell is one
only root could have put there, and which flags a program documents as the same flag.

Without it a rule sees only a line's first word. To a deny rule on `rm -rf*`,
`flock L -c 'rm -rf /'` was flock and `rm -Rf /` had no `-r`; to an allow rule on
`git status*`, `/tmp/x/bash -c 'git status'` was git, though the program that ran was
whatever another user had put in /tmp/x. Deny and ask rules read what every program
here could run (too much rather than too little); an allow rule reads into a shell's
script only for a shell in `SCRIPT_SHELLS` at a trusted path (`trusted_shell`).
"""

from __future__ import annotations

import itertools
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass

Words = tuple[str, ...]

# Programs that read the word after `-c` (or more of their words) as a script. A
# name with a version after it (`bash5.2`, `ksh93`) is the shell's too.
SHELLS = frozenset(
    ("sh", "bash", "rbash", "dash", "ash", "zsh", "ksh", "mksh", "lksh", "pdksh", "oksh",
     "loksh", "yash", "posh", "fish", "csh", "tcsh")
)  # fmt: skip
VERSIONED = re.compile(r"[-.]?\d[\d.]*$")
# Shells whose `-c SCRIPT` an allow rule may match as SCRIPT: for `-c` they read no
# startup file (zsh reads ~/.zshenv; `$BASH_ENV` and `$ENV` are variables an approved
# command may not set) and read a script of plain words as bash does (fish does not).
SCRIPT_SHELLS = frozenset(("sh", "bash", "dash"))
# Where a shell named by its path may be: system directories only root may write.
TRUSTED_DIRS = ("/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin")
SHORT_FLAGS = re.compile(r"-[A-Za-z]+")


@dataclass(frozen=True, slots=True)
class Runs:
    """How a program runs others from its arguments."""

    argv: bool = False  # execs a later word with the words after it (`sudo`, `nice`)
    lines: bool = False  # may hand any later word to a shell (`su`, `trap`, `ssh`)
    letters: str = ""  # short options whose value, glued or the next word, is a line
    longs: tuple[str, ...] = ()  # long options whose value (`=` or next word) is a line
    joined: int = 0  # hands its operands, joined by spaces, to a shell (`watch`): from
    # each of its first `joined` operands (two for an option's value taken for one)

    @property
    def hands_lines(self) -> bool:
        """Whether any of its words may be a command line (`command_lines`)."""
        return self.lines or bool(self.letters or self.longs or self.joined)


# Programs that exec a later word with the words after it, and no more.
EXECUTING = frozenset(
    ("sudo", "doas", "nice", "ionice", "timeout", "nohup", "command", "exec", "builtin",
     "time", "stdbuf", "setsid", "xargs", "chrt", "taskset", "setpriv", "unshare", "chroot",
     "nsenter", "busybox", "coproc", "strace", "ltrace", "pkexec", "systemd-run")
)  # fmt: skip
SHELL_RUNS = Runs(argv=True, lines=True, letters="cC", longs=("--command", "--init-command"))
RUNNERS: dict[str, Runs] = {
    **dict.fromkeys(EXECUTING, Runs(argv=True)),
    "env": Runs(argv=True, letters="S", longs=("--split-string",)),
    "flock": Runs(argv=True, letters="c", longs=("--command",)),
    "script": Runs(letters="c", longs=("--command",)),  # its operand is a file it writes
    "su": Runs(lines=True, letters="c", longs=("--command", "--session-command")),
    "runuser": Runs(argv=True, lines=True, letters="c", longs=("--command", "--session-command")),
    "sg": Runs(argv=True, lines=True),
    "ssh": Runs(argv=True, lines=True),
    "parallel": Runs(argv=True, lines=True),
    "watch": Runs(argv=True, joined=2),  # `sh -c` of its operands, unless -x; -n N
    "eval": Runs(joined=1),
    "trap": Runs(lines=True),
}

# Flags a program documents as one flag (GNU rm and cp: "-r, -R, --recursive"), so
# that a deny rule on `rm -rf*` catches `rm -Rf` and `rm --recursive --force`. A long
# option stands for its letter in any unambiguous abbreviation getopt would take.
SAME_FLAGS: dict[str, dict[str, str]] = {
    "rm": {"R": "r", "--recursive": "r", "--force": "f"},
    "cp": {"R": "r", "--recursive": "r", "--force": "f"},
}


def is_shell(program: str) -> bool:
    """Whether `program`'s name, in any directory, is a shell's: fail safe for deny
    rules, which must read into whatever may be a shell."""
    name = os.path.basename(program)
    return name in SHELLS or VERSIONED.sub("", name) in SHELLS


def runs_of(program: str) -> Runs | None:
    """How the program named `program` (by its name, in any directory) runs others."""
    return SHELL_RUNS if is_shell(program) else RUNNERS.get(os.path.basename(program))


def _root_only(path: str, *, regular: bool = False) -> bool:
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return False
    if regular and not stat.S_ISREG(status.st_mode):
        return False
    return status.st_uid == 0 and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def trusted_shell(program: str) -> bool:
    """Whether `program` is one of SCRIPT_SHELLS that only root could have put there.

    A bare name (`bash`) is: it is found on the agent's PATH as any bare program is,
    and an allow rule trusts that for `git` as much. A path is when it is written in
    one of TRUSTED_DIRS with a SCRIPT_SHELLS name and resolves (symlinks and all) to a
    regular file with such a name in one of them (`/bin/sh` to `/usr/bin/dash`), and
    that file and every directory above it belong to root and nobody else may write
    them. Any other path (`/tmp/x/bash`, `./sh`, a link to /usr/bin/bash in a
    directory another user owns) is a program like any other."""
    if "/" not in program:
        return program in SCRIPT_SHELLS
    written = os.path.normpath(program)
    if os.path.dirname(written) not in TRUSTED_DIRS:
        return False
    try:
        real = os.path.realpath(written)
    except (OSError, ValueError):
        return False
    trusted = {os.path.realpath(directory) for directory in TRUSTED_DIRS}
    if os.path.dirname(real) not in trusted:
        return False
    if not {os.path.basename(written), os.path.basename(real)} <= SCRIPT_SHELLS:
        return False
    above = [real]
    while above[-1] != os.path.dirname(above[-1]):
        above.append(os.path.dirname(above[-1]))
    return _root_only(real, regular=True) and all(_root_only(d) for d in above[1:])


def long_option(word: str, names: tuple[str, ...] | list[str]) -> str | None:
    """The one of `names` that `word` (`--name`, `--name=value`, or getopt's
    abbreviation `--na`) gives, if any; ambiguous abbreviations give the first."""
    name = word.partition("=")[0]
    if len(name) < 3 or not name.startswith("--"):
        return None
    return next((n for n in names if n.startswith(name)), None)


def _option_value(how: Runs, word: str, following: str | None) -> str | None:
    """The command line an option word gives: `-c LINE`, `-cLINE`, `--command=LINE`
    or `--command LINE` for the letters and long options of `how`."""
    if word.startswith("--"):
        if long_option(word, how.longs) is None:
            return None
        return word.partition("=")[2] if "=" in word else following
    at = next((i for i, c in enumerate(word[1:], 2) if c in how.letters), None)
    return None if at is None else (word[at:] or following)


def command_lines(words: Words) -> Iterator[str]:
    """The words (or parts of words) the program named first in `words` may hand a
    shell as a command line: its `-c`/`--command`-like values, every later word for a
    program that passes any to a shell, and for one that joins them, its operands."""
    how = runs_of(words[0])
    if how is None or not how.hands_lines:
        return
    later = words[1:]
    for index, word in enumerate(later):
        if how.lines and word != "--" and not SHORT_FLAGS.fullmatch(word):
            yield word
            if "=" in word:  # --rcfile=…, -oProxyCommand=…
                yield word.partition("=")[2]
        if word[:1] == "-" and (how.letters or how.longs):
            following = later[index + 1] if index + 1 < len(later) else None
            if (value := _option_value(how, word, following)) is not None:
                yield value
    operands = (i for i, word in enumerate(later) if not word.startswith("-"))
    for start in itertools.islice(operands, how.joined):
        yield " ".join(later[start:])


def same_flag(program: str, flag: str) -> str:
    """The letter `flag` (a letter, or a long option) stands for in `program`'s own
    documentation, or `flag` itself."""
    same = SAME_FLAGS.get(os.path.basename(program))
    if not same:
        return flag
    if flag.startswith("--"):
        longs = [name for name in same if name.startswith("--")]
        return same.get(long_option(flag, longs) or "", flag)
    return same.get(flag, flag)
