"""What a warm Claude Code session saves a new conversation.

Each new conversation through the Claude Agent SDK starts the Claude Code CLI and
connects to it before its first prompt. With `agent.warm_spares` (default 1) a
connected session waits for the next new conversation. This measures the first
turn of N new conversations (each its own context, a pause between them so the
spare is back), with warm_spares = 0 and = 1, against:
  - tests/fake_claude_cli.py, which speaks Claude Code's stream-json protocol;
  - the CLI bundled with claude-agent-sdk, with no account (its turn ends at the
    login check: the figure is the start-up and connection it still pays).

Usage: python bench/bench_claude.py [--conversations 10] [--pause 2.0]
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
from bench.bench_core import rpc
from tailagent.agents.claude import bundled_cli
from tests.conftest import start_server

FAKE_CLI = Path(__file__).resolve().parent.parent / "tests" / "fake_claude_cli.py"


def first_turns(
    cli: Path, spares: int, conversations: int, pause: float, expected: str
) -> list[float]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-claude-"))
    home = tmp / "home"  # no login: the real CLI stops at its login check
    home.mkdir()
    config = tmp / "tailagent.toml"
    config.write_text(f'[agent]\nwarm_spares = {spares}\n[claude]\ncli_path = "{cli}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}
    server = start_server(tmp, "--agent", "claude", "--config", str(config),
                          env={**env, "HOME": str(home)})  # fmt: skip
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=10)
    parser.add_argument("--pause", type=float, default=2.0)
    args = parser.parse_args()
    print(f"first turn of a new conversation, median of {args.conversations} (ms)")
    print(f"{'CLI':<36}{'no spare':>12}{'a warm spare':>14}{'ratio':>8}")
    clis = (("fake (tests/fake_claude_cli.py)", FAKE_CLI, "TASK_STATE_COMPLETED"),
            ("bundled with claude-agent-sdk", bundled_cli(), "TASK_STATE_FAILED"))  # fmt: skip
    for name, cli, expected in clis:
        cold = statistics.median(first_turns(cli, 0, args.conversations, args.pause, expected))
        warm = statistics.median(first_turns(cli, 1, args.conversations, args.pause, expected))
        print(f"{name:<36}{cold * 1000:>12.0f}{warm * 1000:>14.0f}{warm / cold:>8.2f}")
    print("command: python bench/bench_claude.py " + " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
