"""`tailagent clean`: removes what tailagent keeps in a state dir that is no
conversation's (see workspace/conversation_repos/ending/holdings.py), saying each first.

It reads the state dir itself, so it removes only while no server runs: a running
server's worktree made ahead is its own, and its stop removes it anyway. Like `discard`,
it asks on a terminal and wants `--yes` otherwise. `--dry-run` only lists, so it runs
beside a server too: what a clean would take once the server stops, less the worktree
made ahead (the running server's own, which its stop removes; its start removed any a
killed one had left).
"""

from __future__ import annotations

import sys
from pathlib import Path

from tailagent.client.errors import EXIT_COMPLETED, EXIT_USAGE
from tailagent.output.visible import visible
from tailagent.statedir.lock import running_server
from tailagent.workspace.conversation_repos.ending.holdings import clean, held


def clean_command(state_dir: Path, yes: bool, dry_run: bool) -> int:
    """Lists what is no conversation's under `<state_dir>/worktrees`, then removes it."""
    server = running_server(state_dir)
    if server is not None:
        running = f"a server runs on {state_dir} (pid {server.get('pid', '?')})"
        if not dry_run:
            print(f"tailagent: {running}: stop it first (a stop removes its worktree made "
                  "ahead; a start, what a killed one left)", file=sys.stderr)  # fmt: skip
            return EXIT_USAGE
        print(f"tailagent: {running}: a clean itself needs it stopped; this lists what it "
              "would take, less the server's own worktree made ahead", file=sys.stderr)  # fmt: skip
    root = state_dir / "worktrees"
    leftover = [holding for holding in held(root) if holding.removable]
    if server is not None:
        leftover = [holding for holding in leftover if holding.kind != "made ahead"]
    if not leftover:
        print(f"nothing to clean: {root} holds only conversations' directories")
        return EXIT_COMPLETED
    print("no conversation's:" if dry_run else "no conversation's, to remove:")
    for holding in leftover:
        print(visible(f"  {holding.line()}"))
    if dry_run:
        return EXIT_COMPLETED
    if not yes:
        if not sys.stdin.isatty():
            print("tailagent: nothing removed: add --yes to remove them", file=sys.stderr)
            return EXIT_USAGE
        if input("Remove them? [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing removed")
            return EXIT_COMPLETED
    removed = clean(root, leftover)
    print(f"removed {len(removed)}")
    return EXIT_COMPLETED
