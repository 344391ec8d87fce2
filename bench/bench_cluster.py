"""Benchmark of a follow-up carried through the service's name against one sent straight
to the box that runs the conversation (issue 58).

One real tailnet on this machine, built as tests/test_tailnet_cluster.py builds it:
two tagged boxes on one PostgreSQL store behind `svc:agents`, each also served on its
own name, and the person's laptop. The service's route points at box2; the person's
conversation runs on box1. Each follow-up (a blocking SendMessage with the
conversation's contextId; echo agent, shared isolation) goes either to
`agents.tail.test`, reaching box2, which carries it to box1 with a signed hop, or
straight to `box1.tail.test`. The ways
alternate call by call, each on its own kept-alive client through the laptop's proxy.

Prints the p50 and p95 of each way and the difference: what carrying a request costs.

Usage: python bench/bench_cluster.py [--requests 40]
Exits non-zero if any call failed or ran anywhere but box1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_core import HEADERS, without_tailnet
from tests.postgres import running_postgres
from tests.real_tailnet import Node, Tailnet
from tests.test_tailnet_cluster import BOXES, URL, Boxes, Laptop, reach, said


def rpc(params: dict[str, object]) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}


async def follow_ups(
    proxy: str, urls: dict[str, str], context_id: str, n: int
) -> tuple[dict[str, list[float]], int]:
    """n follow-ups per way (after two warm-ups each), alternating which goes first."""
    times: dict[str, list[float]] = {way: [] for way in urls}
    failures = 0
    clients = {way: httpx.AsyncClient(proxy=proxy, headers=HEADERS, timeout=60) for way in urls}
    try:
        for way, url in urls.items():
            for _ in range(2):
                await clients[way].post(url, json=rpc(said("warm up", context_id)))
        for i in range(n):
            for way in list(urls) if i % 2 == 0 else list(reversed(urls)):
                start = time.perf_counter()
                response = await clients[way].post(urls[way], json=rpc(said("hello", context_id)))
                elapsed = time.perf_counter() - start
                state = response.json().get("result", {}).get("task", {}).get("status", {})
                if state.get("state") == "TASK_STATE_COMPLETED":
                    times[way].append(elapsed)
                else:
                    failures += 1
                    print(f"  {way}: {response.status_code} {response.text[:300]}")
    finally:
        for client in clients.values():
            await client.aclose()
    return times, failures


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


@contextlib.contextmanager
def team_tailnet() -> Iterator[tuple[Tailnet, Node, str]]:
    """The tests' team on a tailnet of its own: the three tagged boxes, then the laptop
    (user-4, as their config names it), and an empty PostgreSQL store's URL."""
    net = Tailnet(tags=("tag:ci", "tag:agents")).start()
    try:
        for name in BOXES:
            net.add_node(name, proxy=True, tags=("tag:agents",))
        laptop = net.add_node("laptop", proxy=True)
        with running_postgres() as postgres:
            yield net, laptop, postgres.url
    finally:
        net.stop()


def measure(
    net: Tailnet, laptop_node: Node, boxes: Boxes, n: int
) -> tuple[dict[str, list[float]], int, int]:
    """Times, failures and carried requests of n follow-ups each way."""
    for name in ("box1", "box2"):
        boxes.start(name)
    home = f"http://{net.nodes['box1'].dns_name}/"
    with Laptop(laptop_node) as laptop:
        reach(net, boxes, laptop, "box2")
        first = httpx.post(home, json=rpc(said("hello")), headers=HEADERS,
                           proxy=laptop_node.proxy, timeout=60)  # fmt: skip
        context_id = first.json()["result"]["task"]["contextId"]
    urls = {"carried": URL, "direct": home}
    times, failures = asyncio.run(follow_ups(laptop_node.proxy, urls, context_id, n))
    return times, failures, boxes["box1"].log().count("(carried by box2")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    if (missing := without_tailnet()) is not None:
        print(missing)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    with team_tailnet() as (net, laptop_node, store):
        # Shared isolation: a repository per conversation would be measured, not the hop.
        boxes = Boxes(net, tmp, store, "--isolation", "shared")
        try:
            times, failures, carried = measure(net, laptop_node, boxes, args.requests)
        finally:
            for server in boxes.values():
                server.stop()
    for way, values in times.items():
        print(f"{way:>8}: p50 {statistics.median(values) * 1000:.1f} ms, "
              f"p95 {p95(values) * 1000:.1f} ms of {len(values)} follow-ups")  # fmt: skip
    more = statistics.median(times["carried"]) - statistics.median(times["direct"])
    print(
        f"   carry: +{more * 1000:.1f} ms p50 (carried / direct "
        f"{statistics.median(times['carried']) / statistics.median(times['direct']):.2f})"
    )
    print(f"box1 took {carried} carried requests from box2")
    return 1 if failures or carried < args.requests else 0


if __name__ == "__main__":
    sys.exit(main())
