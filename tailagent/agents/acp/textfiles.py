"""The files an agent reads and writes through ACP (`fs/read_text_file`,
`fs/write_text_file`): regular files only, each with one name, bounded in size.

Once, a read ran `Path.read_text()` on the event loop: a FIFO in the workspace held
every request (`/healthz` too) until someone wrote to it, and a 400 MiB sparse file
took the server to 3.4 GB. Here a FIFO, a device or a socket is refused without
waiting on it (opened O_NONBLOCK, then judged by fstat), a file over the cap is
refused by its size before a byte is read, and a range of lines is read block by
block, so memory holds one block and the lines asked for. A file with more than one
hard link is refused: its other name may be outside the workspace, where the agent
could not have reached it by its path. These functions block; callers run them in a
thread (`asyncio.to_thread`), off the event loop.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from tailagent.agents.acp.workspace import open_beneath

BLOCK = 1024 * 1024
KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


class FileRefused(Exception):
    """A file the agent may not read or write as text; str() says why."""


def _check_regular(fd: int, path: str) -> os.stat_result:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        kind = KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
        raise FileRefused(f"{path} is {kind}: only regular files are read and written")
    if info.st_nlink > 1:
        raise FileRefused(
            f"{path} has {info.st_nlink} hard links: a file with another name may be one "
            "from outside the workspace, so tailagent neither reads nor writes it"
        )
    return info


def _over(cap: int, path: str, what: str) -> FileRefused:
    return FileRefused(
        f"{path}: {what} more than agent.max_file_bytes ({cap} bytes); "
        "read it in parts with `line` and `limit`"
    )


def _lines(fd: int, first: int, limit: int | None, cap: int, path: str) -> bytes:
    """Lines `first`.. (1-based), at most `limit` of them, at most `cap` bytes."""
    to_skip = max(first, 1) - 1
    taken = bytearray()
    wanted = limit
    while wanted is None or wanted > 0:
        block = os.read(fd, BLOCK)
        if not block:
            break
        start = 0
        if to_skip:
            newlines = block.count(b"\n")
            if newlines < to_skip:
                to_skip -= newlines
                continue
            for _ in range(to_skip):
                start = block.index(b"\n", start) + 1
            to_skip = 0
        end = len(block)
        if wanted is not None:
            newlines = block.count(b"\n", start)
            if newlines >= wanted:
                end = start
                for _ in range(wanted):
                    end = block.index(b"\n", end) + 1
            wanted -= min(newlines, wanted)
        taken += block[start:end]
        if len(taken) > cap:
            raise _over(cap, path, "the lines asked for come to")
    return bytes(taken)


def read_text(workspace: Path, path: str, line: int | None, limit: int | None, cap: int) -> str:
    """The file's text, or lines `line`.. of it (`limit` of them; 0 or None: to the end)."""
    fd = open_beneath(workspace, path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        info = _check_regular(fd, path)
        if line is None and limit is None and info.st_size > cap:
            raise _over(cap, path, f"the file's {info.st_size} bytes are")
        data = _lines(fd, line or 1, limit or None, cap, path)
    finally:
        os.close(fd)
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise FileRefused(f"{path} is not UTF-8 text (byte {exc.start})") from None


def write_text(workspace: Path, path: str, content: str, cap: int) -> None:
    """Writes `content` over the file, creating it and its directories if need be."""
    data = content.encode()
    if len(data) > cap:
        raise FileRefused(
            f"{path}: {len(data)} bytes to write, more than agent.max_file_bytes ({cap})"
        )
    # Not O_TRUNC: nothing is changed before the file is known to be one to write.
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_NOCTTY
    try:
        fd = open_beneath(workspace, path, flags, make_parents=True)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a FIFO no one reads, a socket
            raise FileRefused(f"{path} is not a regular file: only those are written") from None
        raise
    try:
        _check_regular(fd, path)
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
