"""New conversations a minute with one, two and three boxes at their capacity, behind one
service name that reaches box1 alone (issue 58).

One real tailnet on this machine, built as tests/test_tailnet_cluster.py builds it:
three tagged boxes on one PostgreSQL store behind `svc:agents`, each served on its own
name, and the person's laptop. Each box runs Claude Code's stand-in (tests/
fake_claude_cli.py, a process per conversation, as the real CLI is) with
`agent.max_processes = 2`, so a box holds two turns at once and refuses a third. The
service's route stays on box1: without placement, every conversation would land there.

For 1, 2 and 3 boxes started: 2 × boxes clients, each sending new conversations (a
blocking SendMessage of `slow 2`, two seconds of turn) through the name, one after
another, for --seconds. Prints the conversations completed a minute, the ones refused
(a box full when placed), and where they ran.

Usage: python bench/bench_cluster_throughput.py [--seconds 40]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_cluster import team_tailnet
from bench.bench_core import HEADERS, without_tailnet
from tests.test_tailnet_cluster import BOXES, URL, Boxes, Laptop, reach, route_to, said

FAKE_CLI = Path(__file__).resolve().parent.parent / "tests" / "fake_claude_cli.py"


async def client(http: httpx.AsyncClient, until: float, ran: Counter[str]) -> None:
    """New conversations, one after another, until `until`; each one's box counted."""
    while time.monotonic() < until:
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": said("slow 2")}
        response = await http.post(URL, json=body)
        task = response.json().get("result", {}).get("task", {})
        if task.get("status", {}).get("state") != "TASK_STATE_COMPLETED":
            ran["refused"] += 1
            continue
        got = await http.post(URL, json={"jsonrpc": "2.0", "id": 1, "method": "GetTask",
                                         "params": {"id": task["id"]}})  # fmt: skip
        url = got.json()["result"]["metadata"].get("tailagentServerUrl", "?")
        ran[url.removeprefix("http://").split(".")[0]] += 1


async def load(proxy: str, clients: int, seconds: float) -> Counter[str]:
    ran: Counter[str] = Counter()
    until = time.monotonic() + seconds
    async with httpx.AsyncClient(proxy=proxy, headers=HEADERS, timeout=60) as http:
        await asyncio.gather(*(client(http, until, ran) for _ in range(clients)))
    return ran


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40)
    args = parser.parse_args()
    if (missing := without_tailnet()) is not None:
        print(missing)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-throughput-"))
    results = {}
    with team_tailnet() as (net, laptop_node, store):
        for count in (1, 2, 3):
            boxes = Boxes(net, tmp / f"{count}", store, "--agent", "claude",
                          tables=f'[claude]\ncli_path = "{FAKE_CLI}"\n')  # fmt: skip
            try:
                for name in BOXES[:count]:
                    boxes.start(name)
                route_to(net, "box1")
                with Laptop(laptop_node) as laptop:
                    reach(net, boxes, laptop, "box1")
                time.sleep(2)  # every box's row written
                results[count] = asyncio.run(load(laptop_node.proxy, 2 * count, args.seconds))
            finally:
                for server in boxes.values():
                    server.stop()
    for count, ran in results.items():
        done = sum(n for box, n in ran.items() if box != "refused")
        where = ", ".join(f"{box} {n}" for box, n in sorted(ran.items()) if box != "refused")
        print(f"{count} box{'es' if count > 1 else '  '}: {done * 60 / args.seconds:5.1f} "
              f"conversations/min, {ran['refused']} refused ({where})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
