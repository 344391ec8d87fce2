"""A conversation belongs to whoever started it, through every door of a real server.

The attack (issue 31): caller A starts a conversation with a secret in its worktree;
B, who knows or guesses the context id (commit trailers print it), sends a message
with it, reads its diff, and C, an approver who is not its owner, merges it. Each
must answer "not found", exactly as another person's task does, so nobody learns
more than that the id is not theirs; an admin (the local token) may still act.

People are tailnet identities from the stand-in tailscaled, reached the way
`tailscale serve` reaches the server (X-Forwarded-For from a root-owned socket).
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tailagent.access.tokens import TokenStore
from tailagent.bridge.conversations.ownership import START_ANOTHER
from tests.conftest import RunningServer, start_server
from tests.serve_proxy import ServeProxy
from tests.tailnet import FakeTailscaled, whois
from tests.test_isolation import git, make_project
from tests.warm_start import cli_run

CAP = "example.com/cap/tailagent"
CONFIG = f"""
[access]
allowed_logins = ["alice@example.com", "carol@example.com"]
login_roles = ["caller", "approver"]
capability = "{CAP}"
"""
PEOPLE = {
    "alice": whois("alice@example.com", name="alice-laptop", ip="100.64.0.21"),
    "bob": whois(
        "bob@example.com", name="bob-laptop", ip="100.64.0.22", caps={CAP: [{"role": "caller"}]}
    ),
    "carol": whois("carol@example.com", name="carol-laptop", ip="100.64.0.23"),
}
V1 = {"A2A-Version": "1.0"}


def ip_of(person: str) -> str:
    return str(PEOPLE[person]["Node"]["Addresses"][0].split("/")[0])


@dataclass
class Team:
    tmp: Path
    fake: FakeTailscaled
    repo: Path
    config: Path
    server: RunningServer

    def headers(self, person: str) -> dict[str, str]:
        if person == "admin":
            return {**V1, "Authorization": f"Bearer {self.server.token}"}
        return {**V1, "X-Forwarded-For": ip_of(person)}

    def rpc(self, person: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        reply = httpx.post(self.server.url + "/", json=body, headers=self.headers(person),
                           timeout=30)  # fmt: skip
        answer: dict[str, Any] = reply.json()
        return answer

    def send(self, person: str, message: dict[str, Any]) -> dict[str, Any]:
        message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", **message}
        return self.rpc(person, "SendMessage", {"message": message})

    def say(self, person: str, text: str, context_id: str = "") -> dict[str, Any]:
        extra = {"contextId": context_id} if context_id else {}
        return self.send(person, {"parts": [{"text": text}], **extra})

    def start(self, person: str, text: str, context_id: str) -> str:
        """Starts a turn without waiting for it; its task's id once the turn is running."""
        message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "contextId": context_id,
                   "parts": [{"text": text}]}  # fmt: skip
        params = {"message": message, "configuration": {"returnImmediately": True}}
        task_id = str(result(self.rpc(person, "SendMessage", params))["id"])
        self.wait_until(task_id, "TASK_STATE_WORKING")
        return task_id

    def wait_until(self, task_id: str, state: str, seconds: float = 20) -> None:
        """Waits for the task (read as the admin) to reach `state`."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            task = result(self.rpc("admin", "GetTask", {"id": task_id}))
            if task["status"]["state"] == state:
                return
            time.sleep(0.05)
        raise AssertionError(f"task {task_id} is {task['status']['state']}, not {state}")

    def operate(self, person: str, context_id: str, request: dict[str, Any]) -> dict[str, Any]:
        return self.send(person, {"contextId": context_id, "parts": [{"data": request}]})

    def restart(self) -> None:
        self.server.stop()
        self.server = start_server(self.tmp, "--config", str(self.config), "--isolation",
                                   "worktree", "--tailscale-socket", str(self.fake.socket),
                                   state_dir=self.server.state_dir)  # fmt: skip


def start_team(tmp: Path, config_text: str = CONFIG) -> Team:
    """A git workspace with worktree isolation, served to the three people."""
    fake = FakeTailscaled(tmp / "tailscaled").start()
    for person in PEOPLE:
        fake.peers[ip_of(person)] = PEOPLE[person]
    fake.write()
    repo = tmp / "workspace"
    make_project(repo)
    config = tmp / "tailagent.toml"
    config.write_text(config_text)
    server = start_server(tmp, "--config", str(config), "--isolation", "worktree",
                          "--tailscale-socket", str(fake.socket))  # fmt: skip
    return Team(tmp, fake, repo, config, server)


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    made = start_team(tmp_path_factory.mktemp("owners"))
    yield made
    made.server.stop()
    made.fake.stop()


def result(answer: dict[str, Any]) -> dict[str, Any]:
    assert "result" in answer, answer
    found: dict[str, Any] = answer["result"]
    return found.get("task") or found.get("message") or found


def not_found(answer: dict[str, Any], context_id: str) -> None:
    """The refusal another person's task gets: TaskNotFound, saying nothing more (a
    message is told how to start a conversation of its own)."""
    assert answer.get("error", {}).get("code") == -32001, answer
    assert answer["error"]["message"] in (
        f"Conversation {context_id} not found",
        f"Conversation {context_id} not found{START_ANOTHER}",
    ), answer


def alices_secret(team: Team) -> tuple[str, str]:
    """Alice's conversation, whose worktree holds her secret: (context id, task id)."""
    task = result(team.say("alice", "A SECRET\nedit:secret.txt"))
    assert task["status"]["state"] == "TASK_STATE_COMPLETED", task
    return task["contextId"], task["id"]


def test_another_caller_cannot_run_a_turn_in_my_conversation(team: Team) -> None:
    context_id, _ = alices_secret(team)
    not_found(team.say("bob", "hello", context_id), context_id)
    not_found(team.say("carol", "hello", context_id), context_id)
    # Nothing of bob's was made in it, and alice goes on as before.
    listed = result(team.rpc("bob", "ListTasks", {"contextId": context_id}))
    assert not listed.get("tasks"), listed
    again = result(team.say("alice", "still mine", context_id))
    assert again["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_follow_up_cannot_move_a_task_into_another_conversation(team: Team) -> None:
    context_id, _ = alices_secret(team)
    bobs = result(team.say("bob", "ask"))  # the echo agent waits for an answer
    assert bobs["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", bobs
    moved = team.send("bob", {"taskId": bobs["id"], "contextId": context_id,
                              "parts": [{"text": "yes"}]})  # fmt: skip
    assert moved["error"]["code"] == -32602, moved
    assert f"Task {bobs['id']} is in conversation {bobs['contextId']}" in moved["error"]["message"]


def test_diff_merge_and_discard_of_another_persons_conversation_are_not_found(
    team: Team,
) -> None:
    context_id, _ = alices_secret(team)
    base = git(team.repo, "rev-parse", "main")
    for person, kind in (("bob", "diff"), ("carol", "diff"), ("carol", "merge"),
                         ("carol", "discard")):  # fmt: skip
        answer = team.operate(person, context_id, {"kind": kind})
        not_found(answer, context_id)
        assert "SECRET" not in str(answer)
    # An id nobody has is refused in the same words.
    not_found(team.operate("carol", "no-such-one", {"kind": "merge"}), "no-such-one")
    assert git(team.repo, "rev-parse", "main") == base
    # Nothing of it reached the person's repository (its branch is in its own; the
    # owner's diff below shows it is still there).
    assert "SECRET" not in git(team.repo, "log", "--all", "-p")
    # The owner, and an admin, see it.
    mine = result(team.operate("alice", context_id, {"kind": "diff"}))
    assert "+A SECRET" in mine["parts"][0]["text"]
    admins = result(team.operate("admin", context_id, {"kind": "diff"}))
    assert "+A SECRET" in admins["parts"][0]["text"]


def test_the_http_json_binding_refuses_the_same_way(team: Team) -> None:
    context_id, _ = alices_secret(team)
    for person, part in (("bob", {"text": "hello"}), ("carol", {"data": {"kind": "merge"}})):
        message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "contextId": context_id,
                   "parts": [part]}  # fmt: skip
        reply = httpx.post(team.server.url + "/message:send", json={"message": message},
                           headers=team.headers(person), timeout=30)  # fmt: skip
        assert reply.status_code == 404, reply.text
        said = reply.json()["error"]["message"]
        assert said.startswith(f"Conversation {context_id} not found"), said


def test_a_named_context_is_its_first_callers_and_nobody_can_join_it(team: Team) -> None:
    name = f"team-notes-{uuid.uuid4().hex[:6]}"
    first = result(team.say("bob", "my notes", name))
    assert first["contextId"] == name and first["status"]["state"] == "TASK_STATE_COMPLETED"
    not_found(team.say("alice", "me too", name), name)
    assert result(team.say("bob", "more notes", name))["contextId"] == name


def test_the_admin_may_act_on_any_conversation(team: Team) -> None:
    context_id, _ = alices_secret(team)
    task = result(team.say("admin", "the owner of the box helps", context_id))
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["contextId"] == context_id


def test_a_busy_conversation_does_not_name_a_task_its_owner_cannot_read(team: Team) -> None:
    context_id, _ = alices_secret(team)
    admins = team.start("admin", "slow 2", context_id)
    busy = team.say("alice", "now?", context_id)
    message = busy["error"]["message"]
    assert f"Context {context_id} is busy with another task" in message, busy
    assert admins not in message
    team.wait_until(admins, "TASK_STATE_COMPLETED")
    # The admin, who may read every task, is told which one holds it.
    alices = team.start("alice", "slow 2", context_id)
    told = team.say("admin", "now?", context_id)
    assert f"is busy with task {alices}" in told["error"]["message"], told
    team.wait_until(alices, "TASK_STATE_COMPLETED")


def test_owners_outlive_a_restart(team: Team) -> None:
    context_id, _ = alices_secret(team)
    team.restart()
    not_found(team.say("bob", "after the restart", context_id), context_id)
    assert result(team.say("alice", "mine still", context_id))["contextId"] == context_id


def cli(team: Team, *args: str) -> subprocess.CompletedProcess[str]:
    return cli_run(
        [sys.executable, "-m", "tailagent", *args, "--state-dir", str(team.server.state_dir)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_cli_cannot_diff_merge_or_discard_another_persons_conversation(team: Team) -> None:
    context_id, _ = alices_secret(team)
    # A token as `tailagent token add` makes it, without a CLI run: only the way in.
    token = TokenStore(team.server.state_dir).add(
        f"helper-{uuid.uuid4().hex[:6]}", ("caller", "approver")
    )
    base = git(team.repo, "rev-parse", "main")
    for args in (("diff", context_id), ("merge", context_id), ("discard", context_id, "--yes")):
        done = cli(team, *args, "--token", token)
        assert done.returncode != 0, done
        assert f"Conversation {context_id} not found" in done.stderr, done.stderr
        assert "SECRET" not in done.stdout + done.stderr
    assert git(team.repo, "rev-parse", "main") == base
    mine = cli(team, "diff", context_id)  # the local token: the box's owner, an admin
    assert "+A SECRET" in mine.stdout, mine


def test_an_admin_names_anyones_conversation_by_the_start_of_its_id(team: Team) -> None:
    context_id, _ = alices_secret(team)
    short = context_id[:8]  # as her branch, tailagent/<short id>, shows it
    admins = cli(team, "diff", short)  # the local token: the box's owner, an admin
    assert admins.returncode == 0, admins.stderr
    assert "+A SECRET" in admins.stdout
    # To anyone else the start of another person's id is as unknown as the whole id.
    not_found(team.operate("bob", short, {"kind": "diff"}), short)
    # A start that fits alice's and the admin's own is refused to the admin, naming both;
    # to alice it means her own only.
    tag = uuid.uuid4().hex[:6]
    for person in ("alice", "admin"):
        made = result(
            team.say(person, f"{person} wrote this\nedit:{person}.txt", f"{tag}-{person}")
        )
        assert made["status"]["state"] == "TASK_STATE_COMPLETED", made
    both = cli(team, "diff", tag)
    assert both.returncode == 2, both
    assert both.stderr.strip().endswith(
        f"{tag} is the start of 2 of the conversations you may act on "
        f"({tag}-admin, {tag}-alice): give more of its id"
    ), both.stderr
    hers = result(team.operate("alice", tag, {"kind": "diff"}))["parts"][0]["text"]
    assert "+alice wrote this" in hers and "admin" not in hers


def test_an_upgraded_store_gives_a_joined_conversation_to_whoever_started_it(
    team: Team, browser: Browser
) -> None:
    """Before owners were kept, carol could join alice's conversation; her task there
    is still hers, but the conversation is alice's: the desk offers her no merge of it,
    and her merge of it is refused."""
    context_id, alices_task = alices_secret(team)
    team.server.stop()
    database = sqlite3.connect(team.server.state_dir / "tailagent.db")
    with database:
        row = database.execute("SELECT * FROM tasks WHERE id = ?", (alices_task,)).fetchone()
        columns = [c[1] for c in database.execute("PRAGMA table_info(tasks)")]
        joined = dict(zip(columns, row, strict=True))
        carols_task = str(uuid.uuid4())
        joined.update(id=carols_task, owner="user:carol@example.com",
                      last_updated="2999-01-01 00:00:00.000000")  # fmt: skip
        marks = ", ".join("?" * len(columns))
        database.execute(f"INSERT INTO tasks VALUES ({marks})", list(joined.values()))
        database.execute("DROP TABLE conversation_owners")  # as a store from before
    database.close()
    team.restart()
    port = int(team.server.url.rsplit(":", 1)[1])
    proxy = ServeProxy(port, ip_of("carol")).start()
    page = browser.new_page(viewport={"width": 390, "height": 844})
    try:
        page.goto(proxy.url + f"/desk/tasks/{carols_task}")
        # Its preview is refused as its merge is: no merge is offered, and it says why.
        note = page.locator(".task-head .worktree")
        expect(note).to_contain_text(f"Conversation {context_id} not found")
        expect(page.locator(".task-head details.confirm")).to_have_count(0)
        page.screenshot(path=str(team.tmp / "desk-merge-refused.png"))
    finally:
        page.close()
        proxy.stop()
    not_found(team.say("carol", "and again", context_id), context_id)
    assert "+A SECRET" in result(team.operate("alice", context_id, {"kind": "diff"}))[
        "parts"][0]["text"]  # fmt: skip


def test_a_person_may_hold_only_so_many_worktrees(tmp_path: Path) -> None:
    team = start_team(tmp_path, CONFIG + "[workspace]\nmax_worktrees_per_caller = 2\n")
    try:
        held = [result(team.say("carol", f"edit:{n}.txt"))["contextId"] for n in range(2)]
        refused = team.say("carol", "a third")
        assert refused["error"]["code"] == -32004, refused
        assert "has 2 conversations with a worktree" in refused["error"]["message"]
        assert "workspace.max_worktrees_per_caller = 2" in refused["error"]["message"]
        # Going on in one of them, and another person's new one, are not held back.
        assert result(team.say("carol", "more", held[0]))["status"]["state"] == (
            "TASK_STATE_COMPLETED"
        )
        assert result(team.say("alice", "mine"))["status"]["state"] == "TASK_STATE_COMPLETED"
        # The admin, whose box it is, is not counted.
        for n in range(3):
            assert result(team.say("admin", f"edit:a{n}.txt"))["status"]["state"] == (
                "TASK_STATE_COMPLETED"
            )
        assert "discard" in str(result(team.operate("carol", held[1], {"kind": "discard"})))
        assert result(team.say("carol", "room again"))["status"]["state"] == (
            "TASK_STATE_COMPLETED"
        )
    finally:
        team.server.stop()
        team.fake.stop()
