"""What each person's work costs, with budgets: a real server, the echo agent saying
what each turn cost (`cost:N`), tailnet people through a fake tailscaled and their
own stand-in for `tailscale serve`, and the real CLI reading what the server kept."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailagent.access.tokens import TokenStore
from tailagent.cost.ledger import DayUsage, Usage
from tailagent.store.database import open_database
from tests.conftest import RunningServer, start_server
from tests.postgres import postgres_missing, running_postgres
from tests.serve_proxy import ServeProxy
from tests.tailnet import FakeTailscaled, whois
from tests.test_acp import start_acp
from tests.test_claude import FakeLog
from tests.test_tokens_and_owners import tailagent
from tests.warm_start import cli_run

PEOPLE = {
    "bob": whois("bob@example.com", name="bob-laptop", ip="100.64.0.3"),
    "carol": whois("carol@example.com", name="carol-phone", ip="100.64.0.4"),
}
CONFIG = """
[access]
allowed_logins = ["bob@example.com", "carol@example.com"]
login_roles = ["caller"]
"""
A2A = {"A2A-Version": "1.0"}


@dataclass
class Box:
    server: RunningServer
    proxies: dict[str, ServeProxy]
    tmp: Path

    def send(self, person: str, text: str, context_id: str = "") -> dict[str, Any]:
        """A2A SendMessage (JSON-RPC) as a tailnet person; the whole JSON-RPC reply."""
        message: dict[str, Any] = {
            "messageId": uuid.uuid4().hex,
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        }
        if context_id:
            message["contextId"] = context_id
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                "params": {"message": message}}  # fmt: skip
        url = self.proxies[person].url + "/"
        reply: dict[str, Any] = httpx.post(url, json=body, headers=A2A, timeout=20).json()
        return reply

    def task(self, person: str, text: str, context_id: str = "") -> dict[str, Any]:
        reply = self.send(person, text, context_id)
        assert "result" in reply, reply
        task: dict[str, Any] = reply["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
        return task

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "COLUMNS": "80"}
        return cli_run(
            [sys.executable, "-m", "tailagent", *args, "--state-dir", str(self.server.state_dir)],
            capture_output=True, text=True, timeout=60, env=env,
        )  # fmt: skip

    def restart(self) -> None:
        state_dir = self.server.state_dir
        assert self.server.stop() == 0
        self.server = _serve(self.tmp, state_dir)
        port = int(self.server.url.rsplit(":", 1)[1])
        for proxy in self.proxies.values():
            proxy.upstream_port = port


def _serve(tmp: Path, state_dir: Path | None = None) -> RunningServer:
    return start_server(
        tmp, "--config", str(tmp / "tailagent.toml"),
        "--tailscale-socket", str(tmp / "tailscaled" / "tailscaled.sock"), state_dir=state_dir,
    )  # fmt: skip


@contextmanager
def tailnet(tmp: Path, budgets: str = "") -> Iterator[Box]:
    fake = FakeTailscaled(tmp / "tailscaled").start()
    for person in PEOPLE.values():
        fake.peers[person["Node"]["Addresses"][0].split("/")[0]] = person
    fake.write()
    (tmp / "tailagent.toml").write_text(CONFIG + budgets)
    assert fake.socket == tmp / "tailscaled" / "tailscaled.sock"
    server = _serve(tmp)
    port = int(server.url.rsplit(":", 1)[1])
    proxies = {
        name: ServeProxy(port, person["Node"]["Addresses"][0].split("/")[0]).start()
        for name, person in PEOPLE.items()
    }
    box = Box(server, proxies, tmp)
    try:
        yield box
    finally:
        for proxy in proxies.values():
            proxy.stop()
        box.server.stop()
        fake.stop()


def issue_token(server: RunningServer, name: str, *roles: str) -> str:
    """A bearer token for `server`, made as `tailagent token add` makes it (the same
    TokenStore on its state dir, which the server reads again when it changes), in this
    process: for tests whose subject is not the CLI, a CLI run saved."""
    return TokenStore(server.state_dir).add(name, roles or ("caller",))


def sqlite_store(server: RunningServer) -> str:
    """The store URL of a server on its own SQLite."""
    return f"sqlite+aiosqlite:///{server.state_dir / 'tailagent.db'}"


def usage_today(store_url: str) -> list[DayUsage]:
    """Today's usage rows in the store, read with the ledger `tailagent usage` reads
    with, in this process: for tests that read what was spent, not the CLI's output."""

    async def read() -> list[DayUsage]:
        database = open_database(store_url)
        try:
            usage = Usage(database)
            await usage.initialize()
            return await usage.days(datetime.now(UTC).date())
        finally:
            await database.aclose()

    return asyncio.run(read())


def usage_rows(box: Box, *args: str) -> dict[str, dict[str, Any]]:
    done = box.cli("usage", "--json", *args)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    return {row["person"]: row for row in rows}


def test_costs_add_up_per_person_across_tasks_conversations_and_a_restart(
    tmp_path: Path,
) -> None:
    with tailnet(tmp_path) as box:
        first = box.task("bob", "fix it cost:0.25")
        assert first["metadata"]["cost"] == {"usd": 0.25, "inputTokens": 3, "outputTokens": 4}
        again = box.task("bob", "and this cost:0.5", first["contextId"])
        assert again["metadata"]["cost"]["usd"] == 0.5  # the task's own
        assert again["metadata"]["conversationCost"]["usd"] == 0.75  # its conversation's
        box.task("carol", "mine cost:1")
        box.restart()
        later = box.task("bob", "after the restart cost:0.125")
        assert later["metadata"]["conversationCost"]["usd"] == 0.125  # a new conversation
        # Kept with the task across the restart too.
        box.restart()
        fetched = box.cli("tasks", "--json", "--url", box.server.url)
        assert fetched.returncode == 0, fetched.stderr
        rows = usage_rows(box)
    today = datetime.now(UTC).date().isoformat()
    bob, carol = rows["bob@example.com"], rows["carol@example.com"]
    assert (bob["day"], bob["usd"], bob["turns"], bob["conversations"]) == (today, 0.875, 3, 2)
    assert (bob["inputTokens"], bob["outputTokens"]) == (3 + 3 + 4, 4 + 4 + 5)
    assert (carol["usd"], carol["turns"], carol["owner"]) == (1.0, 1, "user:carol@example.com")
    assert bob["budgetUsd"] is None
    # Every turn's end reads its conversation's cost: through an index, not every row.
    with sqlite3.connect(box.server.state_dir / "tailagent.db") as db:
        plan = db.execute("EXPLAIN QUERY PLAN SELECT SUM(usd) FROM caller_usage"
                          " WHERE context_id = 'c'").fetchall()  # fmt: skip
    assert "ix_caller_usage_context_id" in str(plan), plan


def test_usage_since_leaves_out_earlier_days_and_says_so_when_empty(tmp_path: Path) -> None:
    with tailnet(tmp_path) as box:
        box.task("bob", "cost:0.3")
        tomorrow = (datetime.now(UTC).date() + timedelta(days=1)).isoformat()
        assert usage_rows(box, "--since", tomorrow) == {}
        empty = box.cli("usage", "--since", tomorrow)
        assert empty.stdout == ""
        assert empty.stderr == "no cost recorded on this box for those days\n"
        table = box.cli("usage", "--since", "1d")
    assert table.returncode == 0
    row = next(line for line in table.stdout.splitlines() if "bob@example.com" in line)
    assert row.split() == [datetime.now(UTC).date().isoformat(), "bob@example.com", "$0.30",
                           "—", "—", "1", "1/2"]  # fmt: skip
    assert box.cli("usage", "--since", "last week").returncode == 2


def test_the_call_and_the_task_list_say_what_it_cost(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        env = {**os.environ, "COLUMNS": "80"}
        base = [sys.executable, "-m", "tailagent"]
        where = ["--url", server.url, "--state-dir", str(server.state_dir)]
        call = cli_run([*base, "call", *where, "hello cost:0.25"],
                              capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
        assert call.returncode == 0, call.stderr
        assert (
            call.stdout.splitlines()[-1]
            == "cost $0.25 (2 tokens in, 3 out); this conversation $0.25"
        )
        context = call.stdout.split("context ")[1].split()[0]
        more = cli_run([*base, "call", *where, "--context", context, "more cost:1"],
                              capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
        assert (
            more.stdout.splitlines()[-1]
            == "cost $1.00 (2 tokens in, 3 out); this conversation $1.25"
        )
        free = cli_run([*base, "call", *where, "nothing to pay"],
                              capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
        assert free.stdout.splitlines()[-1] == "[completed]"  # a free turn says nothing of cost
        listed = cli_run([*base, "tasks", *where],
                                capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    finally:
        server.stop()
    # Newest first; at 80 columns a task's title and what it says go under it: the free
    # one says nothing.
    lines = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert [line[1] for line in lines if len(line) == 4] == ["completed"] * 3
    assert [" ".join(line) for line in lines if len(line) != 4] == [
        "nothing to pay",
        "more cost:1",
        "$1.00 (conversation $1.25)",
        "hello cost:0.25",
        "$0.25",
    ]


def test_an_empty_budget_refuses_the_next_task_on_a2a_and_the_desk_and_is_audited(
    tmp_path: Path,
) -> None:
    with tailnet(tmp_path, "[budgets]\nper_caller_daily_usd = 1\n") as box:
        big = box.task("bob", "big job cost:1.5")  # within the budget when it started
        # The desk shows what it cost: on its row in the list, and in the task's head.
        listed = httpx.get(box.proxies["bob"].url + "/desk/", timeout=10).text
        assert '· <span class="cost">$1.50</span>' in listed
        page = httpx.get(box.proxies["bob"].url + f"/desk/tasks/{big['id']}", timeout=10).text
        assert 'cost <span class="cost">$1.50</span>' in page
        box.task("carol", "small job cost:0.25")
        refused = box.send("bob", "one more cost:0.1")
        midnight = (datetime.now(UTC).date() + timedelta(days=1)).isoformat()
        said = (
            "bob@example.com has spent $1.50 of $1.00 today (budgets.per_caller_daily_usd): no "
            f"new task until it resets at {midnight} 00:00 UTC (midnight UTC)"
        )
        assert refused["error"]["message"] == said
        # HTTP+JSON: the same words.
        rest = httpx.post(
            box.proxies["bob"].url + "/message:send", headers=A2A, timeout=20,
            json={"message": {"messageId": "r1", "role": "ROLE_USER", "parts": [{"text": "x"}]}},
        )  # fmt: skip
        assert rest.status_code >= 400
        assert said in rest.text
        # The desk shows it as its refusal page.
        desk = box.proxies["bob"].url
        page = httpx.get(desk + "/desk/", timeout=10).text
        token = re.search(r'name="token" value="([^"]+)"', page)
        assert token is not None
        posted = httpx.post(
            desk + "/desk/tasks", data={"token": token.group(1), "text": "from the desk"},
            headers={"Origin": desk, "Sec-Fetch-Site": "same-origin"}, timeout=10,
        )  # fmt: skip
        assert posted.status_code == 409
        assert said in posted.text
        # Another person's day is their own.
        box.task("carol", "still fine cost:0.25")
        # The box's owner gives bob a budget of his own: his next task goes.
        given = box.cli("budget", "set", "bob@example.com", "5")
        assert given.returncode == 0, given.stderr
        assert given.stdout.startswith("bob@example.com: $5.00 a day, from their next task")
        box.task("bob", "now it goes cost:0.5")
        metrics = httpx.get(
            box.server.url + "/metrics",
            headers={"Authorization": f"Bearer {box.server.token}"}, timeout=10,
        ).text  # fmt: skip
        audit = box.cli("audit", "--json")
    refusals = [json.loads(line) for line in audit.stdout.splitlines()]
    refusals = [r for r in refusals if r["tool"] == "budget"]
    assert [(r["decision"], r["reason"], r["answered_by"]) for r in refusals] == [
        ("deny", said, "tailagent (budget)")
    ] * 3  # A2A, HTTP+JSON, the desk
    assert all(r["input"].startswith("a new task for user:bob@example.com") for r in refusals)
    assert 'tailagent_cost_usd_total{caller="bob@example.com"} 2.0' in metrics
    assert 'tailagent_cost_usd_total{caller="carol@example.com"} 0.5' in metrics
    assert 'tailagent_tokens_total{caller="bob@example.com",kind="input"} 7.0' in metrics


def _rpc_send(
    server: RunningServer, text: str, context_id: str = "", token: str = ""
) -> dict[str, Any]:
    """SendMessage with a token: the box's owner's (the local token: an admin, held to
    no budget) unless another is given."""
    message: dict[str, Any] = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                               "parts": [{"text": text}]}  # fmt: skip
    if context_id:
        message["contextId"] = context_id
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    headers = {**A2A, "Authorization": f"Bearer {token or server.token}"}
    reply = httpx.post(server.url + "/", json=body, headers=headers, timeout=60).json()
    assert "result" in reply, reply
    task: dict[str, Any] = reply["result"]["task"]
    return task


def test_claude_turns_cost_their_share_and_stop_at_the_task_budget(tmp_path: Path) -> None:
    """Claude Code's result restates its whole process's cost: each turn counts what it
    added. `budgets.per_task_usd` is its --max-budget-usd, and its stop says why."""
    fake = Path(__file__).with_name("fake_claude_cli.py")
    config = tmp_path / "claude.toml"
    config.write_text(f'[claude]\ncli_path = "{fake}"\n[budgets]\nper_task_usd = 1\n')
    env = {**os.environ, "FAKE_CLAUDE_LOG": "-"}  # said on stderr: no file of ours inside
    server = start_server(tmp_path, "--agent", "claude", "--config", str(config), env=env)
    try:
        one = _rpc_send(server, "first cost:0.25")
        two = _rpc_send(server, "second cost:0.5", one["contextId"])
        three = _rpc_send(server, "third cost:0.5", one["contextId"])
    finally:
        server.stop()
    assert one["metadata"]["cost"]["usd"] == 0.25
    assert two["metadata"]["cost"]["usd"] == 0.5  # not the process's 0.75
    assert two["metadata"]["conversationCost"]["usd"] == 0.75
    assert two["metadata"]["cost"]["inputTokens"] == 10
    assert three["status"]["state"] == "TASK_STATE_FAILED"
    assert three["status"]["message"]["parts"][0]["text"] == (
        "Stopped: the agent reached its budget of $1.00 (budgets.per_task_usd), which it "
        "counts over its whole session; this task cost $0.50."
    )
    assert three["metadata"]["conversationCost"]["usd"] == 1.25
    argvs = FakeLog(tmp_path / "fake.log").argvs()
    assert argvs and all(a[a.index("--max-budget-usd") + 1] == "1.0" for a in argvs)


def test_an_acp_turn_costs_what_its_running_total_grew_by_and_stops_at_the_task_budget(
    tmp_path: Path,
) -> None:
    """ACP's usage_update carries the session's running cost: a turn costs what it grew
    by, and a turn that crosses `budgets.per_task_usd` is stopped midway, saying so."""
    server = start_acp(tmp_path, config="[budgets]\nper_task_usd = 1\n")
    try:
        one = _rpc_send(server, "usage:0.25 usage:0.4")
        two = _rpc_send(server, "usage:0.7", one["contextId"])
        three = _rpc_send(server, "usage:0.9 usage:1.8 slow 20", one["contextId"])
    finally:
        server.stop()
    assert one["metadata"]["cost"]["usd"] == 0.4
    assert two["metadata"]["cost"]["usd"] == pytest.approx(0.3)  # 0.7 - 0.4
    assert three["status"]["state"] == "TASK_STATE_FAILED"
    assert three["status"]["message"]["parts"][0]["text"] == (
        "Stopped: this task reached its budget of $1.00 (budgets.per_task_usd); it cost $1.10."
    )
    assert three["metadata"]["cost"]["usd"] == pytest.approx(1.1)  # 1.8 - 0.7
    assert three["metadata"]["conversationCost"]["usd"] == pytest.approx(1.8)


@pytest.mark.skipif(postgres_missing() is not None, reason=postgres_missing() or "")
def test_servers_sharing_a_store_count_one_day_and_hold_one_budget(tmp_path: Path) -> None:
    """Two servers on one PostgreSQL store: a person's turns on either add to one day,
    and a budget set through the store holds on both."""
    with running_postgres() as postgres:
        servers = []
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            servers.append(start_server(tmp_path / name, "--store", postgres.url,
                                        state_dir=tmp_path / name / "state"))  # fmt: skip
        try:
            a, b = servers
            tokens = [issue_token(server, "ci", "caller") for server in servers]
            _rpc_send(a, "on a cost:0.5", token=tokens[0])
            _rpc_send(b, "on b cost:0.25", token=tokens[1])
            store = ["--store", postgres.url]
            usage = tailagent("usage", "--json", *store, "--state-dir", str(a.state_dir))
            given = tailagent("budget", "set", "token:ci", "0.5", *store,
                              "--state-dir", str(b.state_dir))  # fmt: skip
            assert given.returncode == 0, given.stderr
            message = {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}]}
            body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                    "params": {"message": message}}  # fmt: skip
            bearer = {**A2A, "Authorization": f"Bearer {tokens[0]}"}
            refused = httpx.post(a.url + "/", json=body, headers=bearer, timeout=20)
        finally:
            for server in servers:
                server.stop()
    [row] = [json.loads(line) for line in usage.stdout.splitlines()]
    assert (row["owner"], row["usd"], row["turns"], row["conversations"]) == (
        "token:ci",
        0.75,
        2,
        2,
    )
    assert refused.json()["error"]["message"].startswith(
        "token:ci has spent $0.75 of $0.50 today (their own daily budget): no new task"
    )


def test_an_acp_turn_that_spends_the_day_is_stopped_midway_and_the_next_refused(
    tmp_path: Path,
) -> None:
    server = start_acp(tmp_path, config="[budgets]\nper_caller_daily_usd = 1\n")
    try:
        token = issue_token(server, "ci", "caller")
        spent = _rpc_send(server, "usage:0.5 usage:1.2 slow 20", token=token)
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": "m2", "role": "ROLE_USER", "parts": [{"text": "more"}]}}}  # fmt: skip
        bearer = {**A2A, "Authorization": f"Bearer {token}"}
        refused = httpx.post(server.url + "/", json=body, headers=bearer, timeout=20).json()
    finally:
        server.stop()
    assert spent["status"]["state"] == "TASK_STATE_FAILED"
    assert spent["status"]["message"]["parts"][0]["text"] == (
        "Stopped: $1.20 spent today (running turns included) reached the daily budget of $1.00 "
        "(budgets.per_caller_daily_usd)."
    )
    assert spent["metadata"]["cost"]["usd"] == pytest.approx(1.2)
    assert refused["error"]["message"].startswith("token:ci has spent $1.20 of $1.00 today")
