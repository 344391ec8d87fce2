"""A command run as a person runs it in a terminal: a pseudo-terminal for its stdin,
stdout and stderr, and what the terminal got, read until the command closes it."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios

COLOURS = re.compile(r"\x1b\[[0-9;]*m")


def in_pty(
    argv: list[str],
    env: dict[str, str] | None = None,
    *,
    columns: int | None = None,
    answer: str | None = None,
) -> bytes:
    """What a terminal (`columns` wide, if given) shows of `argv`, answering `answer`
    to its `[y/N]` question if it asks one."""
    leader, follower = pty.openpty()
    if columns is not None:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    process = subprocess.Popen(argv, stdin=follower, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    seen, answered = b"", answer is None
    try:
        while chunk := _read(leader):
            seen += chunk
            if not answered and b"[y/N] " in seen:
                os.write(leader, f"{answer}\n".encode())
                answered = True
    finally:
        os.close(leader)
        process.wait(timeout=60)
    return seen


def plain(seen: bytes | str) -> str:
    """What the terminal got, but rich's colours and the line discipline's CR before LF."""
    text = seen.decode() if isinstance(seen, bytes) else seen
    return COLOURS.sub("", text).replace("\r\n", "\n")


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the terminal's other side closed
        return b""
