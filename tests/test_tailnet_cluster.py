"""One name, many boxes (issue 58), on the real test tailnet: two tailagent boxes on
one PostgreSQL store, behind one Tailscale Service, and a person's laptop calling the
service's name. Whichever box the name reaches, the person's follow-up, stream,
subscription, diff and merge land on the box that runs the conversation: the box
that got the request carries it there (tailagent/cluster/carry.py), the home box
knowing the person from the carrying box's signed hop.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tailagent.cluster.boxes import STALE
from tests.browser import PHONE
from tests.conftest import RunningServer, start_server
from tests.postgres import postgres_missing, running_postgres
from tests.real_tailnet import DOMAIN, Node, Tailnet, module_tailnet
from tests.test_desk_signin import allow_form
from tests.test_isolation import make_project
from tests.test_resume_stream import events, number, state, text

MISSING = postgres_missing()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")

SERVICE = "svc:agents"
VIP = "100.127.0.2"
URL = f"http://agents.{DOMAIN}/"
LAPTOP_LOGIN = "user-4@fake-control.example.net"  # testcontrol names users in join order
PHONE_LOGIN = "user-5@fake-control.example.net"  # another person's phone
BOXES = ("box1", "box2", "box3")
AT_ONCE = {"configuration": {"returnImmediately": True}}  # the send answers as turns start


@pytest.fixture(scope="module")
def tailnet() -> Iterator[Tailnet]:
    box = {"tags": ("tag:agents",), "proxy": True}
    nodes = {**dict.fromkeys(BOXES, box), "laptop": {"proxy": True}, "phone": {"proxy": True}}
    yield from module_tailnet(nodes, tags=("tag:ci", "tag:agents"))


def node_key(node: Node) -> str:
    return str(json.loads(node.tailscale("status", "--json"))["Self"]["PublicKey"])


def route_to(tailnet: Tailnet, name: str) -> None:
    """The service on both boxes, its address routed to box `name` (control's pick)."""
    hosts = [tailnet.nodes[box] for box in BOXES]
    body = {"name": SERVICE, "vip": VIP, "hosts": [node_key(h) for h in hosts],
            "route": node_key(tailnet.nodes[name])}  # fmt: skip
    request = urllib.request.Request(
        tailnet.url + "/testctl/services", data=json.dumps(body).encode(), method="POST"
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.read() == b"ok\n"


class Boxes(dict[str, RunningServer]):
    """The running server of each box, which a test may stop and start again."""

    def __init__(
        self, tailnet: Tailnet, base: Path, store: str, *extra: str, tables: str = ""
    ) -> None:
        """`extra`: more of `serve`'s arguments for every box; `tables`, more of its
        configuration (TOML tables)."""
        super().__init__()
        self.tailnet, self.base, self.store, self.extra = tailnet, base, store, extra
        self.tables = tables

    def wait_for_turns(self, count: int) -> None:
        """Until the boxes' rows in the store (cluster/boxes.py) hold `count` turns."""
        self.wait_for("SELECT sum(running) FROM boxes", str(count))

    def wait_for(self, query: str, answer: str, seconds: float = 20) -> None:
        """Until the store answers `query` with `answer`."""
        url = self.store.replace("+asyncpg", "")
        deadline = time.monotonic() + seconds
        while True:
            done = subprocess.run(["psql", url, "-Atc", query],
                                  capture_output=True, text=True, check=True)  # fmt: skip
            if done.stdout.strip() == answer:
                return
            assert time.monotonic() < deadline, (query, answer, done.stdout)
            time.sleep(0.1)

    @property
    def shared(self) -> Path:
        """The team's shared repository, where every box pushes its conversations'
        branches (workspace/conversation_repos/handover.py)."""
        return self.base / "team.git"

    def workspace(self, name: str) -> Path:
        """Box `name`'s clone of the team's project."""
        return self.base / name / "workspace"

    def clone(self, name: str) -> None:
        """The team's project, as each box's clone of it, and the shared repository."""
        upstream = self.base / "upstream"
        if not upstream.exists():
            make_project(upstream, {"notes.txt": "from main\n"})
            subprocess.run(["git", "init", "-q", "--bare", str(self.shared)], check=True)
        subprocess.run(["git", "clone", "-q", str(upstream), str(self.workspace(name))],
                       check=True)  # fmt: skip

    def start(self, name: str) -> RunningServer:
        """tailagent on box `name`: the store shared, the service's name public, the
        box's own name served too (where its siblings carry requests)."""
        node, tmp = self.tailnet.nodes[name], self.base / name
        config = tmp / "tailagent.toml"
        if not config.exists():
            self.clone(name)
            config.write_text(
                f'box_url = "http://{node.dns_name}"\ndrain_seconds = 10\n'
                f'[workspace]\nshared_repository = "{self.shared}"\n'
                # One person may fill a box (their share is half of it by default).
                "[agent]\nmax_processes = 2\nmax_processes_per_caller = 2\n"
                f'[access]\nallowed_logins = ["{LAPTOP_LOGIN}", "{PHONE_LOGIN}"]\n'
                f'[delegation]\nsiblings = ["tag:agents"]\nproxy = "{node.proxy}"\n'
                f'scheme = "http"\nport = 80\n{self.tables}'
            )
        server = start_server(
            tmp, "--config", str(config), "--store", self.store,
            "--tailscale-socket", str(node.socket), "--public-url", URL.rstrip("/"),
            *self.extra, state_dir=tmp / "state",
        )  # fmt: skip
        self[name] = server
        node.tailscale("serve", "--bg", "--http=80", server.url)
        node.tailscale("serve", f"--service={SERVICE}", "--http=80", server.url)
        return server


@pytest.fixture(scope="module")
def boxes(tailnet: Tailnet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Boxes]:
    """tailagent on each box, the other box a sibling."""
    route_to(tailnet, "box1")
    with running_postgres() as postgres:
        running = Boxes(tailnet, tmp_path_factory.mktemp("boxes"), postgres.url)
        try:
            for name in BOXES:
                running.start(name)
            yield running
        finally:
            for name, server in running.items():
                tailnet.nodes[name].tailscale("serve", "reset", check=False)
                server.stop()


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def said(words: str, context_id: str = "", **params: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"messageId": f"m-{time.monotonic_ns()}", "role": "ROLE_USER",
                               "parts": [{"text": words}]}  # fmt: skip
    if context_id:
        message["contextId"] = context_id
    return {"message": message, **params}


class Laptop:
    """The person's laptop, calling the service's name through its tailscaled."""

    def __init__(self, node: Node) -> None:
        # A connection each call: one kept from before a route moved leads nowhere.
        self.http = httpx.Client(
            proxy=node.proxy, timeout=60, headers={"A2A-Version": "1.0"},
            limits=httpx.Limits(max_keepalive_connections=0),
        )  # fmt: skip

    def __enter__(self) -> Laptop:
        return self

    def __exit__(self, *_: object) -> None:
        self.http.close()

    def call(self, method: str, params: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while True:  # a call waits while the laptop learns the service's route (502)
            try:
                response = self.http.post(URL, json=rpc(method, params), timeout=timeout)
                if response.status_code != 502:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
            assert time.monotonic() < deadline, response.text
            time.sleep(0.1)
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        assert "error" not in answer, answer
        return dict(answer["result"])

    def refused(self, method: str, params: dict[str, Any]) -> str:
        """The error message of a call that must be refused."""
        response = self.http.post(URL, json=rpc(method, params))
        assert response.headers.get("content-type") == "application/json", response.text
        answer = response.json()
        assert "error" in answer, answer
        return str(answer["error"]["message"])

    def send(self, words: str, context_id: str = "") -> dict[str, Any]:
        return dict(self.call("SendMessage", said(words, context_id))["task"])

    def operation(self, kind: str, context_id: str, **more: Any) -> dict[str, Any]:
        message = said(kind, context_id)
        message["message"]["parts"] = [{"data": {"kind": kind, **more}}]
        reply = self.call("SendMessage", message)["message"]
        return {"text": reply["parts"][0]["text"], **reply["parts"][1]["data"]}

    def stream(self, method: str, params: dict[str, Any], until: str = "") -> list[dict[str, Any]]:
        """The stream's events, to its end or to the first that says `until`."""
        seen = []
        with self.http.stream("POST", URL, json=rpc(method, params)) as response:
            assert response.headers["content-type"].startswith("text/event-stream"), response.read()
            for event in events(response):
                seen.append(event)
                if until and until in text(event):
                    break
        return seen


@pytest.fixture(scope="module")
def laptop(tailnet: Tailnet) -> Iterator[Laptop]:
    device = Laptop(tailnet.nodes["laptop"])
    yield device
    device.http.close()


def access_lines(server: RunningServer) -> list[str]:
    return [line for line in server.log().splitlines() if "tailagent.access:" in line]


def logged(server: RunningServer, *words: str) -> str:
    """The latest access line with all of `words` (a line is written once its answer
    has gone: waited for a moment)."""
    deadline = time.monotonic() + 5
    while True:
        found = [line for line in access_lines(server) if all(w in line for w in words)]
        if found or time.monotonic() > deadline:
            assert found, (words, access_lines(server)[-5:])
            return found[-1]
        time.sleep(0.05)


def reach(tailnet: Tailnet, boxes: Boxes, laptop: Laptop, name: str) -> None:
    """Routes the service to box `name` and waits until the laptop's calls get there."""
    route_to(tailnet, name)
    deadline = time.monotonic() + 30
    while True:
        before = len(access_lines(boxes[name]))
        with contextlib.suppress(httpx.TimeoutException):  # a route moving may drop one
            laptop.call("ListTasks", {}, timeout=5)
        time.sleep(0.05)
        if any("ListTasks" in line for line in access_lines(boxes[name])[before:]):
            return
        assert time.monotonic() < deadline, f"the laptop does not reach {name} after 30 s"


def runner(laptop: Laptop, task: dict[str, Any]) -> str:
    """The box that ran a task, as the store stamps it."""
    stored = laptop.call("GetTask", {"id": task["id"]})
    return str(stored["metadata"]["tailagentServerUrl"])


def homes(laptop: Laptop, task: dict[str, Any]) -> tuple[str, str]:
    """(the box that runs the task, the other one): new conversations are placed by
    load (cluster/placement.py), so a test finds out rather than assumes."""
    home = runner(laptop, task).removeprefix("http://").split(".")[0]
    assert home in BOXES, home
    return home, next(box for box in BOXES if box != home)


def test_a_conversation_goes_on_on_its_box_whichever_box_the_name_reaches(
    tailnet: Tailnet, boxes: Boxes, laptop: Laptop
) -> None:
    first = laptop.send("edit:notes.txt from the laptop")
    context_id = first["contextId"]
    assert first["status"]["state"] == "TASK_STATE_COMPLETED", first
    home, other = homes(laptop, first)
    reach(tailnet, boxes, laptop, other)
    follow = laptop.send("edit:notes.txt again", context_id)
    assert follow["status"]["state"] == "TASK_STATE_COMPLETED", follow
    carried = logged(boxes[other], "SendMessage", "carried to")
    assert f"user:{LAPTOP_LOGIN}" in carried and f"carried to {home}.{DOMAIN}" in carried, carried
    mark = f"user:{LAPTOP_LOGIN} (carried by {other}"
    assert "-> 200" in logged(boxes[home], "SendMessage", mark)
    assert follow["contextId"] == context_id and homes(laptop, follow)[0] == home
    # The diff and the merge, asked through the other box, are of the home box's worktree.
    diff = laptop.operation("diff", context_id)
    assert "again" in json.dumps(diff), diff
    merged = laptop.operation("merge", context_id)
    notes = {name: (box.state_dir.parent / "workspace" / "notes.txt").read_text()
             for name, box in boxes.items()}  # fmt: skip
    assert "again" in notes[home] and "again" not in notes[other], (merged, notes)


def test_a_stream_and_a_subscription_come_from_the_box_that_runs_the_turn(
    tailnet: Tailnet, boxes: Boxes, laptop: Laptop
) -> None:
    first = laptop.send("hello")
    home, other = homes(laptop, first)
    ticking = said("slow 30", first["contextId"], **AT_ONCE)
    running = laptop.call("SendMessage", ticking)["task"]
    reach(tailnet, boxes, laptop, other)
    # A plain subscription, through the other box, to the turn the home box runs.
    followed = laptop.stream("SubscribeToTask", {"id": running["id"]}, until="/30")
    assert "/30" in text(followed[-1]), followed
    logged(boxes[other], "SubscribeToTask", f"task={running['id']}", f"carried to {home}.")
    # And a cancel through the other box ends it there (through the store's signals).
    canceled = laptop.call("CancelTask", {"id": running["id"]})
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED", canceled
    # A turn of the home box's conversation, streamed through the other, event by event.
    streamed = laptop.stream("SendStreamingMessage", said("slow 2", first["contextId"]))
    numbers = [int(n) for n in map(number, streamed) if n is not None]
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), streamed
    assert state(streamed[-1]) == "TASK_STATE_COMPLETED", streamed
    words = "".join(text(e) for e in streamed)
    assert [words.count(f"tick {t}/2") for t in (1, 2)] == [1, 1], words
    logged(boxes[other], "SendStreamingMessage", f"carried to {home}.")


def question(tailnet: Tailnet, boxes: Boxes, laptop: Laptop) -> tuple[dict[str, Any], str, str]:
    """A question the agent asks the laptop: the task, its home box and the other box,
    which the laptop's calls reach now."""
    asked = laptop.send("ask edit")
    assert asked["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", asked
    home, other = homes(laptop, asked)
    reach(tailnet, boxes, laptop, other)
    return asked, home, other


def answered(asked: dict[str, Any]) -> dict[str, Any]:
    answer = said("yes")
    answer["message"]["taskId"] = asked["id"]
    return answer


def test_a_question_asked_on_one_box_is_answered_through_the_other(
    tailnet: Tailnet, boxes: Boxes, laptop: Laptop
) -> None:
    asked, _, _ = question(tailnet, boxes, laptop)
    done = laptop.call("SendMessage", answered(asked))["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED", done
    resumed = [m for m in done["history"] if (m.get("metadata") or {}).get("kind") == "resumed"]
    assert resumed and resumed[-1]["metadata"]["answeredBy"] == LAPTOP_LOGIN, done["history"]
    # From the laptop (the hop names the device whois named), over A2A.
    assert resumed[-1]["metadata"]["answeredFrom"] == "laptop", resumed[-1]["metadata"]


def test_another_person_naming_the_task_finds_nothing_and_nothing_is_carried(
    tailnet: Tailnet, boxes: Boxes, laptop: Laptop
) -> None:
    """Another person (the phone's) naming the laptop's waiting task through the other
    box is told it is not found there, and the home box hears nothing of it; the
    laptop's own answer is carried as before."""
    asked, home, _ = question(tailnet, boxes, laptop)
    with Laptop(tailnet.nodes["phone"]) as phone:
        refusal = phone.refused("SendMessage", answered(asked))
    assert f"Task {asked['id']} not found" in refusal, refusal
    # Heard by a box (the one the phone's own route leads to: its access line is written
    # just after the answer), just not carried.
    deadline = time.monotonic() + 5
    while not any(PHONE_LOGIN in line for name in BOXES for line in access_lines(boxes[name])):
        assert time.monotonic() < deadline, "no box logged the phone's request"
        time.sleep(0.05)
    assert not any(PHONE_LOGIN in line for line in access_lines(boxes[home]))
    done = laptop.call("SendMessage", answered(asked))["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_home_box_that_cannot_be_reached_leaves_the_refusal_naming_it(
    tailnet: Tailnet, boxes: Boxes, laptop: Laptop
) -> None:
    asked, home, other = question(tailnet, boxes, laptop)
    node = tailnet.nodes[home]
    node.tailscale("serve", "--http=80", "off")  # the home box's own name leads nowhere now
    try:
        refusal = laptop.refused("SendMessage", answered(asked))
        named = f"runs on another tailagent server that shares this store (http://{home}."
        assert named in refusal, refusal
        assert f"could not carry POST / to http://{home}.{DOMAIN}" in boxes[other].log()
    finally:
        node.tailscale("serve", "--bg", "--http=80", boxes[home].url)
    done = laptop.call("SendMessage", answered(asked))["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"


def test_a_question_asked_on_one_box_is_answered_from_the_desk_of_the_other(
    tailnet: Tailnet, boxes: Boxes, laptop: Laptop
) -> None:
    """The person opens the desk by the service's name, which reaches the other box,
    and answers there a question the home box's turn asks: the answer is carried."""
    asked, home, other = question(tailnet, boxes, laptop)
    page = laptop.http.get(f"{URL}desk/tasks/{asked['id']}").text
    sent = laptop.http.post(
        f"{URL}desk/tasks/{asked['id']}/answer",
        data=allow_form(page),
        headers={"Origin": URL.rstrip("/")},
    )
    assert sent.status_code == 303, sent.text
    logged(boxes[home], f"carried by {other}", "SendMessage", f"task={asked['id']}")
    deadline = time.monotonic() + 15
    while (done := laptop.call("GetTask", {"id": asked["id"]}))["status"]["state"] != (
        "TASK_STATE_COMPLETED"
    ):
        assert time.monotonic() < deadline, done["status"]
        time.sleep(0.1)


def test_the_desk_on_either_box_lists_which_box_runs_each_task_and_answers_it(
    tailnet: Tailnet, boxes: Boxes, laptop: Laptop, browser: Browser, tmp_path: Path
) -> None:
    """On a phone-sized page reached by the service's name (the other box's desk), the
    waiting task says which box runs it, and its Allow is carried there."""
    asked, home, other = question(tailnet, boxes, laptop)
    context = browser.new_context(proxy={"server": tailnet.nodes["laptop"].proxy},
                                  viewport=PHONE)  # fmt: skip
    try:
        page = context.new_page()
        page.goto(f"{URL}desk/")
        row = page.locator(f'li.row[data-task="{asked["id"]}"]')
        expect(row.locator(".box")).to_have_text(f"on {home}")
        page.screenshot(path=str(tmp_path / "desk-boxes.png"))
        row.locator("button.allow").click()
        expect(page.locator(f'li.row[data-task="{asked["id"]}"] .asks')).to_have_count(0)
    finally:
        context.close()
    logged(boxes[home], f"carried by {other}", "SendMessage", f"task={asked['id']}")
    deadline = time.monotonic() + 15
    while laptop.call("GetTask", {"id": asked["id"]})["status"]["state"] != (
        "TASK_STATE_COMPLETED"
    ):
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_the_desk_of_another_box_merges_the_conversation_on_its_own_box(
    tailnet: Tailnet, boxes: Boxes, laptop: Laptop
) -> None:
    """The task page, reached by the name on another box, shows what a merge would
    bring (a dry run carried to the home box) and merges there from that tip."""
    edited = laptop.send("edit:notes.txt from the desk")
    home, other = homes(laptop, edited)
    reach(tailnet, boxes, laptop, other)
    page = laptop.http.get(f"{URL}desk/tasks/{edited['id']}").text
    form = re.search(r'action="[^"]+/merge".*?name="token" value="([^"]+)".*?name="tip" '
                     r'value="([0-9a-f]+)"', page, re.S)  # fmt: skip
    assert form is not None, page
    sent = laptop.http.post(
        f"{URL}desk/tasks/{edited['id']}/merge",
        data={"token": form.group(1), "tip": form.group(2)},
        headers={"Origin": URL.rstrip("/")},
    )
    assert sent.status_code == 200 and "Merged" in sent.text, sent.text
    logged(boxes[home], f"carried by {other}", "SendMessage")
    merged = (boxes[home].state_dir.parent / "workspace" / "notes.txt").read_text()
    assert "from the desk" in merged, merged


def test_new_conversations_spread_over_the_boxes_with_room(
    tailnet: Tailnet, boxes: Boxes, laptop: Laptop
) -> None:
    """The name reaches box1 only (control routes it to one host), yet three long turns
    started one after the other run on three boxes: each new conversation starts on
    the least loaded box (turns against agent.max_processes, 2 here)."""
    reach(tailnet, boxes, laptop, "box1")
    boxes.wait_for_turns(0)  # the earlier tests' turns are over, on every box's row
    started = []
    for count in range(1, len(BOXES) + 1):
        started.append(laptop.call("SendMessage", said("slow 30", **AT_ONCE))["task"])
        boxes.wait_for_turns(count)  # its box's row says so before the next is placed
    ran = [homes(laptop, task)[0] for task in started]
    assert sorted(ran) == sorted(BOXES), ran
    for box in set(ran) - {"box1"}:
        logged(boxes["box1"], "SendMessage", f"carried to {box}.")
    for task in started:
        state = laptop.call("CancelTask", {"id": task["id"]})["status"]["state"]
        assert state == "TASK_STATE_CANCELED"


def test_a_box_that_stops_drains_its_turns_and_sends_new_work_to_the_other(
    tailnet: Tailnet, boxes: Boxes, laptop: Laptop
) -> None:
    """SIGTERM: the box takes no new conversation (it carries them to its sibling) and
    its working turn ends as it would have, within drain_seconds; then it stops."""
    boxes.wait_for_turns(0)
    working = laptop.call("SendMessage", said("slow 4", **AT_ONCE))
    leaving, staying = homes(laptop, working["task"])
    reach(tailnet, boxes, laptop, leaving)
    stopping = boxes[leaving]
    stopping.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while "draining: no new conversations here" not in stopping.log():
        assert time.monotonic() < deadline, stopping.log()[-2000:]
        time.sleep(0.05)
    placed = laptop.send("hello while it drains")
    assert homes(laptop, placed)[0] != leaving
    assert stopping.process.wait(timeout=30) == 0
    reach(tailnet, boxes, laptop, staying)
    ended = laptop.call("GetTask", {"id": working["task"]["id"]})
    assert ended["status"]["state"] == "TASK_STATE_COMPLETED", ended["status"]
    assert "tick 4/4" in json.dumps(ended)
    boxes.start(leaving)  # back, for the tests after this one


def test_a_box_killed_mid_turn_has_its_turn_failed_once_and_gets_no_new_work(
    tailnet: Tailnet, boxes: Boxes, laptop: Laptop, tmp_path: Path
) -> None:
    """SIGKILL: the box leaves its row behind, unwritten. After STALE seconds its
    sibling claims it, fails the turn it was running (once, saying why), and places
    every new conversation on itself."""
    boxes.wait_for_turns(0)
    working = laptop.call("SendMessage", said("slow 60", **AT_ONCE))
    dead, living = homes(laptop, working["task"])
    reach(tailnet, boxes, laptop, living)
    boxes[dead].stop(signal.SIGKILL)
    killed = time.monotonic()
    while (task := laptop.call("GetTask", {"id": working["task"]["id"]}))["status"]["state"] != (
        "TASK_STATE_FAILED"
    ):
        assert time.monotonic() - killed < STALE + 10, task["status"]
        time.sleep(0.1)
    took = time.monotonic() - killed
    (tmp_path / "failed-after.txt").write_text(f"{took:.2f}\n")
    print(f"\nthe dead box's turn was failed {took:.2f} s after the kill")
    assert f"The box running this task (http://{dead}.{DOMAIN}) stopped answering" in (
        json.dumps(task["status"])
    )
    said_gone = f"the box at http://{dead}.{DOMAIN} stopped answering"
    assert sum(boxes[name].log().count(said_gone) for name in BOXES if name != dead) == 1
    placed = laptop.send("hello after the kill")
    assert homes(laptop, placed)[0] != dead
    boxes.start(dead)


def test_a_killed_boxs_conversation_goes_on_on_another_from_its_last_commit(
    tailnet: Tailnet, boxes: Boxes, laptop: Laptop
) -> None:
    """SIGKILL after a turn that committed: its commit was pushed to the team's shared
    repository as it was made, so once the box is known gone the next message in the
    conversation, sent through the name, goes on on a living box from that commit. The
    turn says so (the agent's session stayed behind). (Its merge there: each box's clone
    has merged other tests' work by now, so it is tests/test_handover.py's.)"""
    first = laptop.send("before the kill\nedit:before.txt")
    context_id = first["contextId"]
    assert first["status"]["state"] == "TASK_STATE_COMPLETED", first
    dead, living = homes(laptop, first)
    commit = first["metadata"]["worktree"]["commit"]
    assert first["metadata"]["worktree"]["shared"] == commit
    reach(tailnet, boxes, laptop, living)
    boxes[dead].stop(signal.SIGKILL)
    boxes.wait_for(f"SELECT count(*) FROM boxes WHERE url LIKE 'http://{dead}.%'", "0",
                   seconds=STALE + 10)  # fmt: skip
    went_on = laptop.send("after the kill\nedit:after.txt", context_id)
    assert went_on["status"]["state"] == "TASK_STATE_COMPLETED", went_on
    home = homes(laptop, went_on)[0]
    assert home != dead and went_on["contextId"] == context_id
    history = json.dumps(laptop.call("GetTask", {"id": went_on["id"]}))
    assert "Continued here" in history and commit[:12] in history, history
    assert "does not remember the earlier turns" in history
    # Both turns' work, on the living box (its diff is of the worktree there), and
    # the first turn's commit as it was made on the dead box, trailers and all.
    diff = json.dumps(laptop.operation("diff", context_id))
    assert "+before the kill" in diff and "+after the kill" in diff, diff
    [tree] = [path.parent for path in (boxes[home].state_dir / "worktrees").glob("*/after.txt")]
    log = subprocess.run(["git", "-C", str(tree), "log", "-2", "--format=%H%n%B"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert commit in log and log.count(f"Requested-by: {LAPTOP_LOGIN}") == 2, log
    boxes.start(dead)
