"""What a warm Claude Code session saves a new conversation.

Each new conversation through the Claude Agent SDK starts the Claude Code CLI and
connects to it before its first prompt. With `agent.warm_spares` (default 1) a
connected session waits for the next new conversation. This measures the first
turn of N new conversations (each its own context, a pause between them so the
spare is back), with warm_spares = 0 and = 1, against:
  - tests/fake_claude_cli.py, which speaks Claude Code's stream-json protocol;
  - the CLI bundled with claude-agent-sdk, with no account (its turn ends at the
    login check: the figure is the start-up and connection it still pays).

With --isolation it measures instead the same first turns on a workspace that is a
git repository of --files small files, served with --isolation shared and then with
--isolation worktree, warm_spares = 1 and = 0. With worktrees the spare's CLI is
started inside the worktree made ahead for the next conversation, which takes both.

Usage: python bench/bench_claude.py [--conversations 10] [--pause 2.0]
       python bench/bench_claude.py --isolation [--conversations 10] [--files 10000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_core import (
    ISOLATION_HEADER,
    check_isolation,
    isolated,
    isolation_row,
    load,
    rpc,
)
from tailagent.agents.claude import bundled_cli
from tests.conftest import start_server

FAKE_CLI = Path(__file__).resolve().parent.parent / "tests" / "fake_claude_cli.py"
CLIS = tuple[tuple[str, Path, str], ...]  # a name, the CLI, how its first turn must end


def first_turns(
    cli: Path,
    spares: int,
    conversations: int,
    pause: float,
    expected: str,
    isolation: str | None = None,
    files: int = 0,
    under: Path | None = None,
) -> list[float]:
    """`isolation` (shared, worktree): served so, on a git repository of `files` files;
    `under`: where to make the server's files (see bench_core.scratch)."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-claude-", dir=under))
    extra = isolated(tmp, isolation, files)
    home = tmp / "home"  # no login: the real CLI stops at its login check
    home.mkdir()
    config = tmp / "tailagent.toml"
    config.write_text(f'[agent]\nwarm_spares = {spares}\n[claude]\ncli_path = "{cli}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    server = start_server(tmp, "--agent", "claude", "--config", str(config), *extra,
                          env={**env, "HOME": str(home)})  # fmt: skip
    check_isolation(server, isolation)
    times = []
    try:
        headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {server.token}"}
        with httpx.Client(headers=headers, timeout=60) as http:
            time.sleep(pause)  # the first spare connects while the server starts
            for _ in range(conversations):
                started = time.perf_counter()
                response = http.post(server.url + "/", json=rpc("SendMessage", "hello"))
                times.append(time.perf_counter() - started)
                # A turn that failed early would time as a fast one: only the expected
                # ending counts (the fake completes; the real CLI, with no account,
                # fails at its login check, which is the figure wanted).
                state = response.json()["result"]["task"]["status"]["state"]
                if state != expected:
                    raise SystemExit(
                        f"a first turn ended {state}, not {expected}:\n{response.text}"
                    )
                time.sleep(pause)
    finally:
        server.stop()
    return times


def isolation(clis: CLIS, conversations: int, pause: float, files: int) -> None:
    print(f"first turn of a new conversation, {conversations} each, a git workspace "
          f"of {files} files (ms)")  # fmt: skip
    print(ISOLATION_HEADER)
    with tempfile.TemporaryDirectory() as under:
        for name, cli, expected in clis:
            for spares, label in ((1, "a warm spare"), (0, "no spare")):
                shared, worktree = (
                    first_turns(
                        cli, spares, conversations, pause, expected, mode, files, Path(under)
                    )
                    for mode in ("shared", "worktree")
                )
                print(isolation_row(f"{name.split()[0]} CLI, {label}", shared, worktree))
    print(f"load average at the end: {load()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--pause", type=float, default=2.0)
    parser.add_argument(
        "--isolation",
        action="store_true",
        help="first turns with --isolation shared against worktree, on a git workspace",
    )
    parser.add_argument("--files", type=int, default=10_000, help="the --isolation workspace's")
    args = parser.parse_args()
    clis = (("fake (tests/fake_claude_cli.py)", FAKE_CLI, "TASK_STATE_COMPLETED"),
            ("bundled with claude-agent-sdk", bundled_cli(), "TASK_STATE_FAILED"))  # fmt: skip
    if args.isolation:
        isolation(clis, args.conversations, args.pause, args.files)
        print("command: python bench/bench_claude.py " + " ".join(sys.argv[1:]))
        return 0
    print(f"first turn of a new conversation, median of {args.conversations} (ms)")
    print(f"{'CLI':<36}{'no spare':>12}{'a warm spare':>14}{'ratio':>8}")
    for name, cli, expected in clis:
        cold = statistics.median(first_turns(cli, 0, args.conversations, args.pause, expected))
        warm = statistics.median(first_turns(cli, 1, args.conversations, args.pause, expected))
        print(f"{name:<36}{cold * 1000:>12.0f}{warm * 1000:>14.0f}{warm / cold:>8.2f}")
    print("command: python bench/bench_claude.py " + " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
