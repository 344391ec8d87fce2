"""Benchmark of the core path: tailagent serve --agent echo on loopback.

Measures, against a real server in a subprocess:
  - N sequential SendMessage calls over one keep-alive connection (median, p95);
  - time to the first streamed event of SendStreamingMessage (median, p95);
  - C concurrent SendStreamingMessage streams, each read to its end (errors, wall time).

Usage: python bench/bench_core.py [--requests 300] [--streams 100] [--floor]
Prints the figures; exits non-zero if any stream failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import start_server

HEADERS = {"A2A-Version": "1.0"}


def rpc(method: str, text: str) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": method,
        "params": {
            "message": {
                "messageId": uuid.uuid4().hex,
                "role": "ROLE_USER",
                "parts": [{"text": text}],
            }
        },
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def sequential(url: str, n: int, headers: dict[str, str]) -> list[float]:
    times = []
    async with httpx.AsyncClient(headers=headers) as http:
        for _ in range(20):  # warm up
            await http.post(url, json=rpc("SendMessage", "warm"))
        for _ in range(n):
            start = time.perf_counter()
            response = await http.post(url, json=rpc("SendMessage", "hello"))
            times.append(time.perf_counter() - start)
            assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    return times


async def first_event(url: str, n: int, headers: dict[str, str]) -> list[float]:
    times = []
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        for _ in range(n):
            start = time.perf_counter()
            async with http.stream("POST", url, json=rpc("SendStreamingMessage", "hi")) as r:
                first = None
                async for line in r.aiter_lines():
                    if first is None and line.startswith("data:"):
                        first = time.perf_counter() - start
                assert first is not None
                times.append(first)
    return times


async def one_stream(http: httpx.AsyncClient, url: str) -> bool:
    final = None
    async with http.stream("POST", url, json=rpc("SendStreamingMessage", "think plan")) as r:
        async for line in r.aiter_lines():
            if line.startswith("data:"):
                event = json.loads(line[5:])
                update = event.get("result", {}).get("statusUpdate")
                if update:
                    final = update["status"]["state"]
    return final == "TASK_STATE_COMPLETED"


async def concurrent(url: str, c: int, headers: dict[str, str]) -> tuple[int, float]:
    limits = httpx.Limits(max_connections=c, max_keepalive_connections=c)
    async with httpx.AsyncClient(headers=headers, timeout=60, limits=limits) as http:
        start = time.perf_counter()
        results = await asyncio.gather(
            *(one_stream(http, url) for _ in range(c)), return_exceptions=True
        )
        wall = time.perf_counter() - start
    errors = sum(1 for r in results if r is not True)
    return errors, wall


def ms(value: float) -> str:
    return f"{value * 1000:.2f} ms"


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument(
        "--floor",
        action="store_true",
        help="serve with a2a-sdk's in-memory task store: the SDK path without persistence",
    )
    args = parser.parse_args()
    floor = (str(Path(__file__).with_name("floor_server.py")),)
    program = floor if args.floor else ("-m", "tailagent")
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), program=program)
        try:
            headers = {**HEADERS, "Authorization": f"Bearer {server.token}"}
            seq = await sequential(server.url, args.requests, headers)
            first = await first_event(server.url, min(args.requests, 100), headers)
            errors, wall = await concurrent(server.url, args.streams, headers)
        finally:
            server.stop()
    print(
        f"SendMessage x{len(seq)} sequential: median {ms(statistics.median(seq))}, "
        f"p95 {ms(pct(seq, 0.95))}"
    )
    print(
        f"first streamed event x{len(first)}: median {ms(statistics.median(first))}, "
        f"p95 {ms(pct(first, 0.95))}"
    )
    print(f"{args.streams} concurrent streams: {errors} errors, wall {wall:.2f} s")
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
