"""What a server's start and a CLI run cost: the suite's unit of work.

    python bench/bench_start.py --runs 9

Nearly all of the test suite's CPU is Python processes starting: a `tailagent serve`
per test or module, a CLI run per step. Printed, as medians of `--runs`: a server's
wall time from its exec until it says where it serves, and the CPU it and its children
(the card signer) used by then, on a fresh state dir (a key made, the card signed);
then the CPU of `tailagent call hello` against it and of `tailagent token list`, each
a whole process run; beside what the same python takes to start and end doing nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import RunningServer, start_server

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    """CPU seconds of a live process and of its children it has reaped."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return sum(int(f) for f in fields[11:15]) / TICKS


def child_cpu(args: list[str], env: dict[str, str] | None = None) -> float:
    """CPU seconds of one whole run of `args` (it and what it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(args, env=env, capture_output=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def one_start(tmp: Path) -> tuple[float, float, RunningServer]:
    started = time.perf_counter()
    server = start_server(tmp)
    return time.perf_counter() - started, cpu_of(server.process.pid), server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    runs = parser.parse_args().runs
    walls, cpus, calls, tokens, empty = [], [], [], [], []
    cli = [sys.executable, "-m", "tailagent"]
    with tempfile.TemporaryDirectory() as scratch:
        for n in range(runs):
            wall, cpu, server = one_start(Path(scratch) / str(n))
            env = {**os.environ, "TAILAGENT_TOKEN": server.token}
            try:
                calls.append(child_cpu([*cli, "call", "hello", "--url", server.url], env))
                state = ["--state-dir", str(server.state_dir)]
                tokens.append(child_cpu([*cli, "token", "list", *state]))
            finally:
                server.stop()
            walls.append(wall)
            cpus.append(cpu)
            empty.append(child_cpu([sys.executable, "-c", "pass"]))
    print(f"runs: {runs}, medians")
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    print(f"server start: {wall:.2f} s wall, {cpu:.2f} s CPU")
    print(f"call hello:   {statistics.median(calls):.2f} s CPU")
    print(f"token list:   {statistics.median(tokens):.2f} s CPU")
    print(f"python -c pass: {statistics.median(empty):.2f} s CPU")


if __name__ == "__main__":
    main()
