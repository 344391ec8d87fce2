"""The one-file binary beside the package: size, start to READY=1, idle memory.

For each way of running tailagent (the package's console script in this
virtualenv, and dist/tailagent from tailagent/binary/build.py), N times:
`serve --agent echo` on a fresh state dir, timed from Popen to READY=1 on a
NOTIFY_SOCKET of ours (what systemd waits for); then, after 3 s idle, the resident
memory of the whole process tree (the binary's bootloader runs Python as a child).
The binary runs with PATH=/usr/bin:/bin and no PYTHONPATH/PYTHONHOME/VIRTUAL_ENV.

Usage: python bench/bench_binary.py [--runs 5] [--binary dist/tailagent]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.processes import tree_rss_kib  # noqa: E402

START_TIMEOUT = 60.0
IDLE = 3.0


def start_once(command: list[str], env: dict[str, str], tmp: Path) -> tuple[float, float]:
    """(seconds to READY=1, idle MiB of the process tree)."""
    notify_path = tmp / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    notify.settimeout(START_TIMEOUT)
    (tmp / "workspace").mkdir()
    args = [*command, "serve", "--agent", "echo", "--listen", "127.0.0.1:0",
            "--state-dir", str(tmp / "state"), "--cwd", str(tmp / "workspace")]  # fmt: skip
    log = (tmp / "server.log").open("w")
    started = time.perf_counter()
    process = subprocess.Popen(
        args, stdout=log, stderr=subprocess.STDOUT, env={**env, "NOTIFY_SOCKET": str(notify_path)}
    )
    try:
        while b"READY=1" not in notify.recv(4096):
            pass
        ready = time.perf_counter() - started
        time.sleep(IDLE)
        return ready, tree_rss_kib(process.pid) / 1024
    except TimeoutError:
        why = (tmp / "server.log").read_text()
        raise SystemExit(f"{command[0]} did not start:\n{why}") from None
    finally:
        process.terminate()
        process.wait(timeout=30)
        notify.close()
        log.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--binary", type=Path, default=ROOT / "dist" / "tailagent")
    args = parser.parse_args()
    if not args.binary.is_file():
        raise SystemExit(f"no binary at {args.binary}: python tailagent/binary/build.py first")
    package = Path(sys.executable).with_name("tailagent")
    plain = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("TAILAGENT_")
    }
    ways = {
        "package": ([str(package)], plain),
        "binary": ([str(args.binary.resolve())], {**plain, "PATH": "/usr/bin:/bin"}),
    }
    results: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in ways}
    for _ in range(args.runs):  # alternate, so drift on this noisy machine hits both
        for name, (command, env) in ways.items():
            with tempfile.TemporaryDirectory() as tmp:
                ready, rss = start_once(command, env, Path(tmp))
            results[name][0].append(ready)
            results[name][1].append(rss)
    size = args.binary.stat().st_size / 1024 / 1024
    print(f"$ python bench/bench_binary.py --runs {args.runs}")
    print(f"binary {args.binary} {size:.1f} MiB; medians of {args.runs} starts")
    for name, (ready, rss) in results.items():
        print(
            f"{name:8s} start to READY=1 {statistics.median(ready):.2f} s "
            f"(min {min(ready):.2f}, max {max(ready):.2f}); "
            f"idle RSS {statistics.median(rss):.1f} MiB"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
