"""Benchmark of a delegated echo turn (laptop -> A -> B) against a direct call (laptop -> B).

One real tailnet on this machine (tests/real_tailnet.py), built as
tests/test_real_delegation.py builds it: the person's node "laptop", and "boxa" and
"boxb" each running tailagent with the echo agent behind `tailscale serve --http=80`.
A hands work to B without asking (`[delegation] allow_peers = ["boxb"]`), reaching it
through boxa's tailscaled; B lets boxa delegate (`allowed_nodes = ["boxa"]`) and
fetches A's keys through boxb's. Every call comes from the laptop, through its proxy.

Measures N blocking SendMessage calls each way, alternating call by call, on one
kept-alive client per way: `delegate:boxb hello` to A (which opens its own A2A stream
to B, signs a hop of the actor chain, and B verifies it) and `hello` straight to B.
Prints the medians and their ratio; the difference is what a hop costs.

Usage: python bench/bench_delegation.py [--requests 20]
Exits non-zero if any call failed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_core import HEADERS, rpc, without_tailnet
from tests.real_tailnet import Tailnet
from tests.test_real_delegation import PERSON, Box, start_box, stop_box

WAYS = {"delegated": "delegate:boxb hello", "direct": "hello"}


def answer(response: httpx.Response) -> str:
    """The completed task's text, or "" when the call did not complete."""
    if response.status_code != 200:
        return ""
    task = response.json().get("result", {}).get("task", {})
    if task.get("status", {}).get("state") != "TASK_STATE_COMPLETED":
        return ""
    parts = [p for a in task.get("artifacts", []) for p in a.get("parts", [])]
    return "".join(p.get("text", "") for p in parts) or "(completed)"


async def sequential(
    proxy: str, urls: dict[str, str], n: int
) -> tuple[dict[str, list[float]], int]:
    """n calls per way (after one warm-up each), alternating which way goes first."""
    times: dict[str, list[float]] = {way: [] for way in urls}
    failures = 0
    clients = {way: httpx.AsyncClient(proxy=proxy, headers=HEADERS, timeout=120) for way in urls}
    try:
        for way, url in urls.items():  # the first delegation pins A's key on B
            await clients[way].post(url, json=rpc("SendMessage", WAYS[way]))
        for i in range(n):
            for way in list(urls) if i % 2 == 0 else list(reversed(urls)):
                start = time.perf_counter()
                response = await clients[way].post(urls[way], json=rpc("SendMessage", WAYS[way]))
                elapsed = time.perf_counter() - start
                if answer(response):
                    times[way].append(elapsed)
                else:
                    failures += 1
                    print(f"  {way}: {response.status_code} {response.text[:300]}")
    finally:
        for client in clients.values():
            await client.aclose()
    return times, failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20)
    args = parser.parse_args()
    if (missing := without_tailnet()) is not None:
        print(missing)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="bench-delegation-"))
    net = Tailnet().start()
    boxes: list[Box] = []
    try:
        laptop = net.add_node("laptop", proxy=True)  # user-1: the person
        node_a, node_b = net.add_node("boxa", proxy=True), net.add_node("boxb", proxy=True)
        # Shared isolation: a repository per conversation would be measured, not the hop.
        inbound, outbound = {"allowed_nodes": ["boxa"]}, {"allow_peers": ["boxb"]}
        boxes.append(start_box(node_b, tmp / "boxb", [PERSON], inbound, "shared"))
        boxes.append(start_box(node_a, tmp / "boxa", [PERSON], outbound, "shared"))
        urls = {"delegated": f"http://{node_a.dns_name}/", "direct": f"http://{node_b.dns_name}/"}
        times, failures = asyncio.run(sequential(laptop.proxy, urls, args.requests))
    finally:
        for box in boxes:
            stop_box(box)
        net.stop()
    medians = {way: statistics.median(t) if t else float("nan") for way, t in times.items()}
    for way, median in medians.items():
        print(f"{way:>9}: median {median * 1000:.1f} ms of {len(times[way])} calls")
    print(f"    ratio: {medians['delegated'] / medians['direct']:.2f} (delegated / direct)")
    print(f"overhead: {(medians['delegated'] - medians['direct']) * 1000:.1f} ms a delegated turn")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
