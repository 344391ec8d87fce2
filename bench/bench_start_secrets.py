"""How long a starting server's `TS_AUTHKEY` is readable by another process of its user.

    python bench/bench_start_secrets.py --runs 5

Each run starts `tailagent serve` as nobody with the key in its environment, watched by
tests/secret_probe.py as nobody from the server's exec until it serves (the way
tests/test_start_secrets.py does; root, whom the kernel lets read anything, would see
it all along). Printed per run: until when the key was seen in /proc/<pid>/environ,
fd/* or mem (wall seconds since the exec; where, in brackets) and the CPU seconds the
server had used by then, beside what the same python3 takes to start and end doing
nothing. Needs root, runuser and the user nobody.
"""

from __future__ import annotations

import argparse
import pwd
import shutil
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.test_sandbox_nobody import USER, give
from tests.test_start_secrets import KINDS, probe, python_start_cpu, serve, why_not


def readable_until(seen: dict[str, Any]) -> tuple[float, list[str]]:
    """When the key stopped being readable, and in which of the three it was seen."""
    until, where = 0.0, []
    for kind in KINDS:
        states = seen[kind]
        last = max((n for n, (_, state) in enumerate(states) if state == "secret"), default=None)
        if last is not None:
            where.append(kind)
            until = max(until, states[last + 1][0] if last + 1 < len(states) else float("inf"))
    return until, where


def one_run() -> tuple[float, float, float]:
    top = Path(tempfile.mkdtemp(prefix="tailagent-bench-", dir="/var/tmp"))
    try:
        top.chmod(0o755)
        for name in ("home", "state", "workspace"):
            (top / name).mkdir(mode=0o700)
            give(top / name, pwd.getpwnam(USER))
        key = f"tskey-auth-{uuid.uuid4().hex}"
        seen, server = serve(top, key, USER, probe(key))
        server.stop()
        until, where = readable_until(seen)
        start = python_start_cpu(top)
        print(f"readable until {until:.3f} s {where}, {seen['cpu'] or 0:.2f} s CPU by then "
              f"(python3 -c pass: {start:.3f} s CPU)")  # fmt: skip
        return until, seen["cpu"] or 0.0, start
    finally:
        shutil.rmtree(top, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    reason = why_not()
    if reason is not None:
        raise SystemExit(reason)
    runs = [one_run() for _ in range(args.runs)]
    for n, what in enumerate(("readable until (s)", "CPU by then (s)", "python3 start CPU (s)")):
        values = [run[n] for run in runs]
        print(f"{what}: median {statistics.median(values):.3f}, "
              f"{min(values):.3f} – {max(values):.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
