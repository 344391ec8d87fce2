"""What a git worktree per conversation costs a new conversation, on a big repository.

With `--isolation worktree` every new A2A conversation gets a git worktree and branch
of its own, made in its first turn. This makes a throwaway git repository (--files
small files, --per-dir to a directory, two levels of directories, one commit) and
measures, with the echo agent:
  - the real server, once with --isolation shared and once with --isolation worktree,
    each on its own copy of the repository: N new conversations, each a first turn
    `hello` (with isolation its worktree is made in that turn) and then a turn that
    edits, `edit:notes.txt hi` (with isolation it ends in a commit); median and p95;
  - merging M more conversations (each `hello`, then one edit of its own file, started
    before the N) through the A2A data part `{"kind": "merge"}`: squash, which also
    removes the worktree and branch; and the first turn of a new conversation started
    just after each merge;
  - git alone on another copy, median of --git-runs: `git worktree add` (and with
    --no-checkout: all of it but writing the files), `git worktree remove --force`,
    and the disk one worktree takes (du);
  - tailagent's worktree code in this process on that copy, the same median: a new
    conversation's worktree (`ConversationRepos.ensure`) made then, and taken from those made
    ahead (`ConversationRepos.prepare`, as the server keeps one), a turn's end
    (`Isolated.turn_ended`) with nothing changed and with one file changed (a commit).

Nothing is deleted before the end but by those merges (see bench_core.scratch): on a
journal-less ext4 a file made within minutes of many being deleted is slow to make, so
run it a few minutes after anything deleted many files (another run's clean-up).

Usage: python bench/bench_worktree.py [--conversations 30] [--files 10000] [--per-dir 50]
       [--merges 5] [--git-runs 10] [--pause 1.5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_acp import client, send, timed_turn, turn
from bench.bench_core import (
    ISOLATION_HEADER,
    check_isolation,
    git_repo,
    isolated,
    isolation_row,
    load,
    pct,
)
from tailagent.bridge.conversations.workplace import Isolated, TurnRecord
from tailagent.workspace.conversation_repos import ConversationRepos
from tests.conftest import start_server

MODES = ("shared", "worktree")
EDIT = "edit:notes.txt hi"


async def merge(http: httpx.AsyncClient, url: str, context_id: str) -> float:
    """Merges a conversation (squash) through the A2A data part; its time."""
    start = time.perf_counter()
    response = (await http.post(url, json=send("", context_id, {"kind": "merge"}))).json()
    elapsed = time.perf_counter() - start
    text = response.get("result", {}).get("message", {}).get("parts", [{}])[0].get("text", "")
    if not text.startswith("merged (squash)"):
        raise SystemExit(f"a merge did not happen: {response}")
    return elapsed


def committed(task: dict[str, Any]) -> bool:
    return bool(task.get("metadata", {}).get("worktree", {}).get("commit"))


async def served(tmp: Path, mode: str, args: argparse.Namespace) -> dict[str, list[float]]:
    """N new conversations on a server in `mode`, and (worktree) M merges."""
    server = start_server(tmp, *isolated(tmp, mode, args.files, args.per_dir))
    check_isolation(server, mode)
    times: dict[str, list[float]] = {"first": [], "edit": [], "merge": [], "after": []}
    try:
        async with client(server) as http:
            # The conversations to merge start first, so their worktrees are not brand new
            # when merged (removing a worktree just made, still in memory, is quicker).
            to_merge = []
            for n in range(args.merges if mode == "worktree" else 0):
                _, context_id = await turn(http, server.url, "hello")
                await turn(http, server.url, f"edit:merged-{n}.txt hi", context_id)
                to_merge.append(context_id)
            for _ in range(args.conversations):
                elapsed, context_id = await turn(http, server.url, "hello")
                times["first"].append(elapsed)
                elapsed, task = await timed_turn(http, server.url, EDIT, context_id)
                times["edit"].append(elapsed)
                if committed(task) != (mode == "worktree"):
                    raise SystemExit(f"the edit turn's commit is not as expected: {task}")
                await asyncio.sleep(args.pause)
            for context_id in to_merge:
                times["merge"].append(await merge(http, server.url, context_id))
                await asyncio.sleep(args.pause)
                # A new conversation just after a merge removed a worktree's files.
                times["after"].append((await turn(http, server.url, "hello"))[0])
                await asyncio.sleep(args.pause)
    finally:
        server.stop()
    return times


def git(repo: Path, *args: str) -> float:
    start = time.perf_counter()
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)
    return time.perf_counter() - start


def du_kib(*paths: Path, apparent: bool = False) -> int:
    options = ["-sk", "--apparent-size"] if apparent else ["-sk"]
    out = subprocess.run(["du", *options, *map(str, paths)], capture_output=True, text=True)
    return sum(int(line.split()[0]) for line in out.stdout.splitlines())


def git_add(repo: Path, runs: int) -> dict[str, Any]:
    """`git worktree add` with and without its checkout, and the disk one takes."""
    full = [repo.parent / "git-alone" / f"full-{n}" for n in range(runs)]
    bare = [repo.parent / "git-alone" / f"bare-{n}" for n in range(runs)]
    add = [git(repo, "worktree", "add", "-q", "-b", f"g/{p.name}", str(p)) for p in full]
    bare_add = [
        git(repo, "worktree", "add", "-q", "--no-checkout", "-b", f"g/{p.name}", str(p))
        for p in bare
    ]
    admin = repo / ".git" / "worktrees" / full[0].name
    disk = (du_kib(full[0]), du_kib(full[0], apparent=True), du_kib(admin))
    return {"add": add, "bare": bare_add, "disk": disk, "made": (full, bare)}


def git_remove(repo: Path, full: list[Path], bare: list[Path]) -> list[float]:
    """Removes what git_add made; the times of `git worktree remove --force` of `full`."""
    times = [git(repo, "worktree", "remove", "--force", str(path)) for path in full]
    for path in bare:
        git(repo, "worktree", "remove", "--force", str(path))
    git(repo, "branch", "-q", "-D", *(f"g/{path.name}" for path in full + bare))
    return times


async def timed(step: Awaitable[object]) -> float:
    start = time.perf_counter()
    await step
    return time.perf_counter() - start


async def in_process(worktrees: ConversationRepos, runs: int) -> dict[str, list[float]]:
    """tailagent's own worktree code: what the server runs in a turn, without the server
    (the worktrees are left for the end: see bench_core.scratch)."""
    conversations = Isolated(worktrees)
    times: dict[str, list[float]] = {"ensure": [], "adopt": [], "quiet": [], "commit": []}
    for n in range(runs):
        times["ensure"].append(await timed(worktrees.ensure(f"bench-now-{n}")))
        await worktrees.prepare()  # as the server does after each new conversation
        context_id = f"bench-{n}"
        times["adopt"].append(await timed(worktrees.ensure(context_id)))
        turn_end = conversations.turn_ended(TurnRecord(f"t{n}", context_id, "hello", "bench"))
        times["quiet"].append(await timed(turn_end))
        worktree = await worktrees.get(context_id)
        assert worktree is not None
        (worktree.path / "notes.txt").write_text("hi\n")
        turn_end = conversations.turn_ended(TurnRecord(f"e{n}", context_id, EDIT, "bench"))
        times["commit"].append(await timed(turn_end))
    return times


def ms_row(label: str, values: list[float]) -> str:
    """A row with the median and p95 of `values` under the worktree column."""
    p50, p95 = statistics.median(values) * 1000, pct(values, 0.95) * 1000
    return f"{label:<34}{'':>16}{p50:>10.1f}{p95:>8.1f}"


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=30)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--per-dir", type=int, default=50, help="files to a directory")
    parser.add_argument("--merges", type=int, default=5)
    parser.add_argument("--git-runs", type=int, default=10)
    parser.add_argument(
        "--pause", type=float, default=1.5, help="seconds between turns (people pause too)"
    )
    args = parser.parse_args()
    print(f"load average at the start: {load()}")
    # Nothing is deleted before the end but by merges, timed last (see bench_core.scratch).
    with tempfile.TemporaryDirectory(prefix="bench-worktree-") as tmp:
        direct = Path(tmp) / "direct" / "repo"
        folders = git_repo(direct, args.files, args.per_dir)
        os.sync()  # each part starts with no other part's writes still to go to disk
        alone = git_add(direct, args.git_runs)
        os.sync()
        worktrees = ConversationRepos(direct, direct.parent / "in-process")
        own = await in_process(worktrees, args.git_runs)
        runs = {}
        for mode in MODES:
            os.sync()
            runs[mode] = await served(Path(tmp) / mode, mode, args)
        os.sync()
        alone["remove"] = git_remove(direct, *alone["made"])
        for n in range(args.git_runs):
            await worktrees.discard(f"bench-{n}")
            await worktrees.discard(f"bench-now-{n}")
        await worktrees.aclose()
    shared, tree = runs["shared"], runs["worktree"]
    print(f"a git repository of {args.files} files in {folders} directories, one commit")
    print(f"{args.conversations} new conversations per mode, the echo agent (ms)")
    print(ISOLATION_HEADER)
    print(isolation_row("first turn (hello), new context", shared["first"], tree["first"]))
    print(isolation_row("next turn (edit), commits", shared["edit"], tree["edit"]))
    print(ms_row(f"merge (squash) x{args.merges}, A2A data", tree["merge"]))
    if tree["after"]:
        print(ms_row("first turn just after a merge", tree["after"]))
    print(f"git alone on the repository, median of {args.git_runs} (ms)")
    print(ms_row("  git worktree add", alone["add"]))
    print(ms_row("  git worktree add --no-checkout", alone["bare"]))
    print(ms_row("  git worktree remove --force", alone["remove"]))
    worktree_kib, apparent_kib, admin_kib = alone["disk"]
    print(
        f"  one worktree on disk: {worktree_kib / 1024:.1f} MiB (files' own size "
        f"{apparent_kib / 1024:.1f} MiB), its index and admin in .git {admin_kib / 1024:.1f} MiB"
    )
    print(f"tailagent's worktree code in process, median of {args.git_runs} (ms)")
    print(ms_row("  ConversationRepos.ensure, made now", own["ensure"]))
    print(ms_row("  ConversationRepos.ensure, made ahead", own["adopt"]))
    print(ms_row("  turn end, nothing changed", own["quiet"]))
    print(ms_row("  turn end, one file changed", own["commit"]))
    print(f"load average at the end: {load()}")
    print("command: python bench/bench_worktree.py " + " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
