"""Cost follows the person across boxes: what a person's work handed to another box cost
there is kept on the first box as delegated cost (its own column in `tailagent usage`,
never in their own cost, but counted against their day's budget), and work that came
through another box is shown as the person's "via" that box. A real server and the
real CLI; the delegated figures are written to the server's own store, as the delegator
writes them when a peer's task ends."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailagent.card.keys import SigningKey
from tailagent.cost.ledger import Cost, Usage
from tailagent.store.database import open_database
from tests.conftest import RunningServer, start_server
from tests.postgres import postgres_missing, running_postgres
from tests.tailnet import FakeTailscaled, send_message
from tests.test_cost import A2A, Box, issue_token, tailnet
from tests.test_delegation_inbound import (  # noqa: F401 (its fixtures, used here)
    ALICE,
    answer,
    box_a,
    chain,
    fake,
    pending_id,
    send,
    serve_b,
)
from tests.test_tokens_and_owners import tailagent
from tests.warm_start import cli_run

BOB = "user:bob@example.com"


def on_store(url: str, step: Callable[[Usage], Awaitable[object]]) -> None:
    """Does `step` on the ledger of the store at `url`, as another part of the server
    would (the server keeps running)."""

    async def run() -> None:
        database = open_database(url)
        try:
            usage = Usage(database)
            await usage.initialize()
            await step(usage)
        finally:
            await database.aclose()

    asyncio.run(run())


def sqlite_url(box: Box) -> str:
    return f"sqlite+aiosqlite:///{box.server.state_dir / 'tailagent.db'}"


def wide_usage(state_dir: Path) -> str:
    """`tailagent usage` as a table on a terminal wide enough for "… via devbox-1"."""
    env = {**os.environ, "COLUMNS": "120"}
    done = cli_run(
        [sys.executable, "-m", "tailagent", "usage", "--state-dir", str(state_dir)],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def usage_lines(box: Box) -> list[dict[str, Any]]:
    done = box.cli("usage", "--json")
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_delegated_cost_has_a_column_of_its_own_and_counts_against_the_day(
    tmp_path: Path,
) -> None:
    with tailnet(tmp_path, "[budgets]\nper_caller_daily_usd = 1\n") as box:
        task = box.task("bob", "hand this on cost:0.25")
        url = sqlite_url(box)

        def peer_reports(peer_task: str, usd: float) -> Callable[[Usage], Awaitable[None]]:
            return lambda usage: usage.record_delegated(
                BOB, task["contextId"], task["id"], "devbox-2", usd, peer_task
            )

        on_store(url, peer_reports("p1", 0.5))
        on_store(url, peer_reports("p1", 0.5))  # a retry: counted once
        on_store(url, peer_reports("p1", 0.375))  # a late, older figure: never lowers it
        on_store(url, peer_reports("p1", float("nan")))  # no cost: refused
        # Carol only handed work on: her row is there, at no cost of her own.
        on_store(url, lambda u: u.record_delegated("user:carol@example.com", "c", "t",
                                                   "devbox-2", 0.125, "p9"))  # fmt: skip
        box.task("bob", "within the day still cost:0")  # $0.25 own + $0.50 delegated
        on_store(url, peer_reports("p2", 0.25))  # another peer task of the same task
        refused = box.send("bob", "one more")
        rows = usage_lines(box)
        table = box.cli("usage")
    assert refused["error"]["message"].startswith(
        "bob@example.com has spent $1.00 of $1.00 today (budgets.per_caller_daily_usd), "
        "$0.75 of it on work handed to other boxes: no new task until it resets at "
    )
    by_person = {row["person"]: row for row in rows}
    bob, carol = by_person["bob@example.com"], by_person["carol@example.com"]
    assert (bob["usd"], bob["delegatedUsd"], bob["turns"], bob["via"]) == (0.25, 0.75, 2, "")
    assert (carol["usd"], carol["delegatedUsd"], carol["turns"]) == (0.0, 0.125, 0)
    today = datetime.now(UTC).date().isoformat()
    header = next(line for line in table.stdout.splitlines() if "day (UTC)" in line)
    assert header.split() == ["day", "(UTC)", "person", "cost", "delegated", "budget", "turns",
                              "tokens", "in/out"]  # fmt: skip
    lines = {line.split()[1]: line.split() for line in table.stdout.splitlines()
             if line.startswith(f" {today}")}  # fmt: skip
    # (The CLI is given no config here: no budget it knows of.)
    tokens = f"{bob['inputTokens']}/{bob['outputTokens']}"
    assert lines["bob@example.com"] == [today, "bob@example.com", "$0.25", "$0.75", "—",
                                        "2", tokens]  # fmt: skip
    assert lines["carol@example.com"][2:4] == ["$0.00", "$0.12"]


def test_work_that_came_through_another_box_is_the_persons_via_that_box(
    tmp_path: Path,
) -> None:
    """On the peer, a delegated turn is counted to the person, its row naming the node it
    came through; their direct work is a row of its own; their budget here holds both."""
    with tailnet(tmp_path, "[budgets]\nper_caller_daily_usd = 1\n") as box:
        box.task("bob", "mine cost:0.5")
        on_store(sqlite_url(box), lambda u: u.add(BOB, "ctx-from-a", Cost(0.5, 10, 20),
                                                  via="devbox-1"))  # fmt: skip
        refused = box.send("bob", "more")
        rows = usage_lines(box)
        table = wide_usage(box.server.state_dir)
    assert refused["error"]["message"].startswith("bob@example.com has spent $1.00 of $1.00")
    assert sorted((row["person"], row["via"], row["usd"], row["turns"]) for row in rows) == [
        ("bob@example.com", "", 0.5, 1),
        ("bob@example.com", "devbox-1", 0.5, 1),
    ]
    assert any(
        line.split()[1:6] == ["bob@example.com", "via", "devbox-1", "$0.50", "—"]
        for line in table.splitlines()
    ), table


def test_a_delegated_turn_is_counted_via_the_box_that_handed_it(
    tmp_path: Path,
    fake: FakeTailscaled,  # noqa: F811 (the fixture imported above)
    box_a: SigningKey,  # noqa: F811
) -> None:
    """Box B, handed alice's work by devbox-1 through a signed chain: its turns are
    alice's "via devbox-1", also a turn taken back after B restarted and answered by
    alice from her laptop directly; her own direct work stays a row of its own."""
    b = serve_b(tmp_path, fake, box_a, '["caller", "approver"]')
    try:
        status, body = send(b, chain(box_a), send_message("handed on cost:0.5"))
        assert status == 200 and body["result"]["task"]["status"]["state"] == (
            "TASK_STATE_COMPLETED"
        ), body
        status, body = send(b, chain(box_a), send_message("ask first cost:0.25"))
        waiting = body["result"]["task"]
        request_id = pending_id(waiting)
        b.stop(signal.SIGTERM)
        b = start_server(tmp_path, *b.process.args[b.process.args.index("--config") :],
                         state_dir=b.state_dir)  # fmt: skip
        status, body = send(b, None, answer(waiting, request_id), source="laptop")
        assert status == 200 and body["result"]["task"]["status"]["state"] == (
            "TASK_STATE_COMPLETED"
        ), body
        status, body = send(b, None, send_message("mine cost:0.125"), source="laptop")
        assert status == 200, body
    finally:
        b.stop()
    done = tailagent("usage", "--json", "--state-dir", str(b.state_dir))
    assert done.returncode == 0, done.stderr
    rows = sorted((r["person"], r["via"], r["usd"], r["turns"])
                  for r in map(json.loads, done.stdout.splitlines()))  # fmt: skip
    # The taken-back turn is the echo of what it is told of the answer (no cost:N in
    # it): still alice's via devbox-1, though she answered from her laptop.
    assert rows == [(ALICE, "", 0.125, 1), (ALICE, "devbox-1", 0.5, 2)]
    table = wide_usage(b.state_dir)
    assert any(line.split()[1:5] == [ALICE, "via", "devbox-1", "$0.50"]
               for line in table.splitlines()), table  # fmt: skip


_OLD_USAGE = (
    "CREATE TABLE caller_usage (owner TEXT NOT NULL, day TEXT NOT NULL,"
    " context_id TEXT NOT NULL, usd {real} NOT NULL, input_tokens BIGINT NOT NULL,"
    " output_tokens BIGINT NOT NULL, turns BIGINT NOT NULL,"
    " PRIMARY KEY (owner, day, context_id))"
)


def _old_store(url: str, real: str) -> None:
    """A store written before delegation: its usage rows have no `via`."""

    async def run() -> None:
        database = open_database(url)
        try:
            await database.execute(_OLD_USAGE.format(real=real))
            await database.execute(
                "INSERT INTO caller_usage VALUES (:o, :d, 'old', 0.5, 1, 2, 1)",
                {"o": "token:ci", "d": datetime.now(UTC).date().isoformat()},
            )
        finally:
            await database.aclose()

    asyncio.run(run())


def _send(server: RunningServer, token: str, text: str) -> dict[str, Any]:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    headers = {**A2A, "Authorization": f"Bearer {token}"}
    reply: dict[str, Any] = httpx.post(server.url + "/", json=body, headers=headers,
                                       timeout=30).json()  # fmt: skip
    return reply


def test_a_store_from_before_delegation_keeps_its_rows(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    _old_store(f"sqlite+aiosqlite:///{state / 'tailagent.db'}", "REAL")
    done = tailagent("usage", "--json", "--state-dir", str(state))
    assert done.returncode == 0, done.stderr
    [row] = [json.loads(line) for line in done.stdout.splitlines()]
    assert (row["owner"], row["usd"], row["via"], row["delegatedUsd"]) == ("token:ci", 0.5, "", 0.0)


@pytest.mark.skipif(postgres_missing() is not None, reason=postgres_missing() or "")
def test_delegated_cost_on_a_shared_postgresql_store(tmp_path: Path) -> None:
    """A PostgreSQL store from before delegation takes the new rows: delegated cost once
    per peer task, the via row, and the budget counting both."""
    with running_postgres() as postgres:
        _old_store(postgres.url, "DOUBLE PRECISION")
        server = start_server(tmp_path, "--store", postgres.url, state_dir=tmp_path / "state")
        try:
            token = issue_token(server, "ci", "caller")
            task = _send(server, token, "on a cost:0.25")["result"]["task"]
            for usd in (0.5, 0.5, 0.25):
                on_store(postgres.url, lambda u, usd=usd: u.record_delegated(
                    "token:ci", task["contextId"], task["id"], "devbox-2", usd, "p1"))  # fmt: skip
            on_store(postgres.url, lambda u: u.add("token:ci", "c2", Cost(0.125), via="devbox-1"))
            store = ["--store", postgres.url, "--state-dir", str(server.state_dir)]
            given = tailagent("budget", "set", "token:ci", "1", *store)
            assert given.returncode == 0, given.stderr
            refused = _send(server, token, "more")
            usage = tailagent("usage", "--json", *store)
        finally:
            server.stop()
    rows = sorted(
        (r["via"], r["usd"], r["delegatedUsd"], r["turns"])
        for r in map(json.loads, usage.stdout.splitlines())
    )
    assert rows == [("", 0.75, 0.5, 2), ("devbox-1", 0.125, 0.0, 1)]
    assert refused["error"]["message"].startswith(
        "token:ci has spent $1.38 of $1.00 today (their own daily budget), $0.50 of it on "
        "work handed to other boxes: no new task"
    )
