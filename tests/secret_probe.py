"""What another process may read of a starting process's secret, and when: the probe an
agent of the server's user (or another user's process) would be, run as that user.

    { echo PID; sleep 5; } | runuser -u nobody -- python3 tests/secret_probe.py SECRET

It says `ready` and then reads the pid to watch from stdin (so it can be started before
the server and miss none of its start), polls /proc/<pid>/environ, every regular file
among /proc/<pid>/fd/* and the environment's pages in /proc/<pid>/mem as fast as it can
until stdin says more or ends, and prints, as JSON, for each of the three what it got
whenever that changed: [seconds since the pid came, "secret" | "read" | "refused" |
"gone"]; and `cpu`, the CPU seconds the process had used when the secret was last seen
(null if never): how far its start had got, whatever the box's load. Standard library
only: it runs under any python3, as any user.
"""

from __future__ import annotations

import json
import os
import select
import stat
import sys
import time

SECRET = sys.argv[1].encode()


def environ(pid: int) -> str:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        return "secret" if SECRET in handle.read() else "read"


def descriptors(pid: int) -> str:
    """Every regular file the process holds open (a memfd is one), read through /proc;
    pipes and sockets are left alone, a read of them would take the process's data."""
    got = "read"
    for name in os.listdir(f"/proc/{pid}/fd"):
        path = f"/proc/{pid}/fd/{name}"
        try:
            if not stat.S_ISREG(os.stat(path).st_mode):
                continue
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            continue  # closed since the listing
        try:
            if SECRET in os.pread(fd, 1 << 20, 0):
                got = "secret"
        finally:
            os.close(fd)
    return got


def memory(pid: int) -> str:
    """The pages the kernel laid the environment out in; their bounds are in stat only
    for a reader allowed to see them, and the open itself is what is refused."""
    fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end (fields 50, 51)
        return "secret" if start and SECRET in os.pread(fd, end - start, start) else "read"
    finally:
        os.close(fd)


def look(reader: object, pid: int) -> str:
    try:
        return reader(pid)  # type: ignore[operator]
    except PermissionError:
        return "refused"
    except (FileNotFoundError, ProcessLookupError):
        return "gone"
    except OSError as exc:  # mem of a process mid-exec, an fd gone between stat and open
        return "gone" if exc.errno in (3, 5) else "refused"


def cpu(pid: int) -> float:
    """utime + stime (fields 14, 15 of /proc/<pid>/stat), shown to anyone."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    print("ready", flush=True)
    pid = int(sys.stdin.readline())
    began = time.monotonic()
    seen: dict[str, list[list[object]]] = {"environ": [], "fd": [], "mem": []}
    readers = {"environ": environ, "fd": descriptors, "mem": memory}
    used = None
    while not select.select([sys.stdin], [], [], 0)[0]:
        now = time.monotonic() - began
        for kind, reader in readers.items():
            got = look(reader, pid)
            if got == "secret":
                used = cpu(pid)
            if not seen[kind] or seen[kind][-1][1] != got:
                seen[kind].append([round(now, 4), got])
    print(json.dumps({**seen, "cpu": used}))


if __name__ == "__main__":
    main()
