"""What pushing each conversation's branch to the team's shared repository costs a turn,
and what taking a conversation over on another box costs its next turn.

A throwaway project of --files small files (bench_core.git_repo) is cloned as two boxes'
workspaces, beside an empty bare repository both name as `workspace.shared_repository`
(workspace/conversation_repos/handover.py). In this process, with tailagent's own code:
  - a turn's end (`Isolated.turn_ended`) with one file changed, its commit pushed, against
    the same without a shared repository: --turns conversations each, median and p95;
    the first push of all (it sends the project's history) apart;
  - on the other box, the next turn's directory of each pushed conversation
    (`Isolated.directory` after `continue_here`: the repository made from the pushed
    commit) against a new conversation's there (one made ahead is taken: the server
    keeps one).

Usage: python bench/bench_handover.py [--files 10000] [--turns 20]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_core import git_repo, load, ms, pct
from tailagent.bridge.conversations.workplace import Isolated, TurnRecord
from tailagent.workspace.conversation_repos import ConversationRepos


async def timed(call: Awaitable[Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await call
    return time.perf_counter() - started, result


def row(label: str, values: list[float]) -> str:
    return f"{label:<58} {ms(statistics.median(values)):>9} {ms(pct(values, 95)):>9}"


async def turn_ends(box: Isolated, prefix: str, turns: int) -> list[float]:
    """Each of `turns` new conversations: its directory, one file changed, its turn's end."""
    took = []
    for n in range(turns):
        context_id = f"{prefix}-{n}"
        path = await box.directory(context_id)
        assert path is not None
        (path / f"{prefix}{n}.txt").write_text("the agent's\n")
        spent, said = await timed(box.turn_ended(TurnRecord(f"t{n}", context_id, "edit", "bench")))
        assert said and said.get("commit"), said
        took.append(spent)
    return took


def team(tmp: Path, files: int) -> Path:
    """The project cloned as three boxes' workspaces, and the empty shared repository."""
    upstream = tmp / "upstream"
    git_repo(upstream, files)
    shared = tmp / "team.git"
    subprocess.run(["git", "init", "-q", "--bare", str(shared)], check=True)
    for name in ("box1", "box2", "alone"):
        subprocess.run(["git", "clone", "-q", str(upstream), str(tmp / name)], check=True)
    return shared


async def run(tmp: Path, files: int, turns: int) -> None:
    shared = team(tmp, files)

    def box(name: str, with_shared: bool) -> Isolated:
        repos = ConversationRepos(tmp / name, tmp / f"{name}-state" / "worktrees",
                                  shared=str(shared) if with_shared else None)  # fmt: skip
        return Isolated(repos)

    alone, box1, box2 = box("alone", False), box("box1", True), box("box2", True)
    first = await turn_ends(box1, "first", 1)
    pushed = await turn_ends(box1, "pushed", turns)
    kept = await turn_ends(alone, "kept", turns)
    taken, fresh = [], []
    for n in range(turns):
        box2.continue_here(f"pushed-{n}")
        spent, _ = await timed(box2.directory(f"pushed-{n}"))
        taken.append(spent)
        spent, _ = await timed(box2.directory(f"new-{n}"))
        fresh.append(spent)
    for each in (alone, box1, box2):
        await each.aclose()
    print(f"{files} files, {turns} conversations each; {load()}")
    print(f"{'':<58} {'median':>9} {'p95':>9}")
    print(row("turn's end, one file committed, no shared repository", kept))
    print(row("turn's end, one file committed and pushed", pushed))
    print(row("  the very first push (the project's history goes too)", first))
    print(row("next turn's directory on another box: taken over", taken))
    print(row("a new conversation's directory on that box", fresh))
    cost = statistics.median(pushed) - statistics.median(kept)
    print(f"the push costs a turn {ms(cost)} (median against median)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-handover-", dir="/var/tmp") as tmp:
        asyncio.run(run(Path(tmp), args.files, args.turns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
