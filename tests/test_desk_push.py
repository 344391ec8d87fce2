"""The desk's Web Push, end to end: a person subscribes from the real page in Chromium,
a task starts waiting, the server's encrypted push reaches a push service, and the
service worker shows it and answers from its Allow and Deny.

The browser's own push service is Google's, out of reach here, so the page's
`PushManager.subscribe` is stubbed to return a subscription at a stand-in on loopback
(tests/push_service.py) that checks the VAPID JWT and decrypts with the subscription's
keys, as a real push service and browser would. What the stand-in decrypted is then
delivered to the real service worker as a push event, and its notification clicked.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Worker, expect

from tailagent.tailnet.localapi import HIT_TTL
from tests.browser import CHROMIUM, FLAGS, PHONE
from tests.conftest import RunningServer, start_server
from tests.postgres import postgres_missing, running_postgres
from tests.push_service import PushService
from tests.serve_proxy import ServeProxy
from tests.tailnet import OWNER, FakeTailscaled, whois
from tests.test_desk import CAP, PEOPLE
from tests.test_tokens_and_owners import add_token, tailagent

# The box as the push names it: its host name, when its URL is a loopback address.
BOX = socket.gethostname().split(".")[0]
CAROL_IP = "100.64.0.4"  # let in by a grant of the tailnet (CAP) alone
NO_POSTGRES = postgres_missing()


@dataclass
class Desk:
    tmp: Path
    fake: FakeTailscaled
    push: PushService
    server: RunningServer
    proxies: dict[str, ServeProxy]

    def url(self, person: str, path: str = "/desk/") -> str:
        return self.proxies[person].url + path

    def client(self, person: str) -> httpx.Client:
        """A program on `person`'s device: its POSTs carry the page's Origin."""
        origin = self.proxies[person].url
        return httpx.Client(base_url=origin, headers={"Origin": origin}, timeout=10)

    def rpc(self, method: str, params: dict[str, Any], token: str | None = None) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {token or self.server.token}"}
        reply = httpx.post(self.server.url + "/", json=body, headers=headers, timeout=15)
        return reply.json()

    def send(self, person: str, text: str) -> str:
        """A new task from `person`'s device (through their stand-in for tailscale serve)."""
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
            "message": {"messageId": f"m{time.monotonic_ns()}", "role": "ROLE_USER",
                        "parts": [{"text": text}]},
            "configuration": {"returnImmediately": True}}}  # fmt: skip
        reply = httpx.post(self.url(person, "/"), json=body, headers={"A2A-Version": "1.0"},
                           timeout=15)  # fmt: skip
        return str(reply.json()["result"]["task"]["id"])

    def state(self, task_id: str) -> str:
        return str(self.rpc("GetTask", {"id": task_id})["result"]["status"]["state"])

    def wait_state(self, task_id: str, wanted: str, seconds: float = 10) -> dict[str, Any]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            task: dict[str, Any] = self.rpc("GetTask", {"id": task_id})["result"]
            if task["status"]["state"] == wanted:
                return task
            time.sleep(0.1)
        raise AssertionError(f"task {task_id} is {self.state(task_id)}, not {wanted}")

    def subscribe(self, person: str) -> str:
        """Subscribes a new stand-in browser for `person`; returns its stand-in id."""
        browser = self.push.subscribe()
        with self.client(person) as client:
            token = client.get("/desk/push/key").json()["token"]
            made = client.post(
                "/desk/push/subscriptions", json={"subscription": browser.to_json(), "token": token}
            )
        assert made.status_code == 201, made.text
        return browser.id

    def subscriptions(self, person: str) -> list[dict[str, Any]]:
        with self.client(person) as client:
            found: list[dict[str, Any]] = client.get("/desk/push/key").json()["subscriptions"]
        return found

    def grant(self, *roles: str) -> None:
        """Carol's tailnet grant is now `roles` (none: she has no grant, and is not in
        access.allowed_logins), as whois says once its last answer is stale."""
        caps = {CAP: [{"roles": list(roles)}]} if roles else {}
        carol = whois("carol@example.com", name="carol-phone", ip=CAROL_IP, caps=caps)
        self.fake.peers[CAROL_IP] = carol
        self.fake.write()
        time.sleep(HIT_TTL + 0.2)

    def answer(self, person: str, token: str, action: str) -> httpx.Response:
        """A notification's Allow or Deny, as `person`'s service worker posts it."""
        with self.client(person) as client:
            return client.post("/desk/push/answer", json={"token": token, "action": action})

    def start(self, *extra: str) -> None:
        config = self.tmp / "tailagent.toml"
        config.write_text(
            f'[access]\nallowed_logins = ["bob@example.com"]\nlogin_roles = ["caller"]\n'
            f'capability = "{CAP}"\n[desk]\npush_services = ["{self.push.origin}"]\n'
        )
        self.server = start_server(
            self.tmp, "--config", str(config), "--tailscale-socket", str(self.fake.socket),
            *extra, state_dir=self.tmp / "state",
        )  # fmt: skip
        port = int(self.server.url.rsplit(":", 1)[1])
        for proxy in self.proxies.values():
            proxy.upstream_port = port


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    tmp = tmp_path_factory.mktemp("push")
    fake = FakeTailscaled(tmp / "tailscaled").start()
    for person in PEOPLE.values():
        fake.peers[person["Node"]["Addresses"][0].split("/")[0]] = person
    fake.write()
    push = PushService()
    proxies = {
        name: ServeProxy(0, person["Node"]["Addresses"][0].split("/")[0]).start()
        for name, person in PEOPLE.items()
    }
    made = Desk(tmp, fake, push, None, proxies)  # type: ignore[arg-type]
    made.start()
    yield made
    for proxy in proxies.values():
        proxy.stop()
    made.server.stop()
    push.stop()
    fake.stop()


@contextlib.contextmanager
def beside(desk: Desk, tmp: Path, *extra: str) -> Iterator[Desk]:
    """Another server, started with `extra`, for the same people, tailscaled and push
    service as `desk`'s, behind stand-ins of its own: a test on another store runs on
    it and leaves the module's server as it was (no restart to put that one back)."""
    proxies = {
        name: ServeProxy(0, person["Node"]["Addresses"][0].split("/")[0]).start()
        for name, person in PEOPLE.items()
    }
    other = Desk(tmp, desk.fake, desk.push, None, proxies)  # type: ignore[arg-type]
    try:
        other.start(*extra)
        yield other
    finally:
        for proxy in proxies.values():
            proxy.stop()
        if other.server is not None:
            other.server.stop()


@pytest.fixture(autouse=True)
def clean(desk: Desk) -> None:
    """Each test starts with no subscription and nothing received."""
    for person in PEOPLE:
        for found in desk.subscriptions(person):
            with desk.client(person) as client:
                token = client.get("/desk/push/key").json()["token"]
                client.post(
                    "/desk/push/subscriptions/remove", json={"id": found["id"], "token": token}
                )
    desk.push.received.clear()
    desk.push.refused.clear()


def stub_push_manager(context: BrowserContext, subscription: dict[str, Any]) -> None:
    """The page's PushManager returns the stand-in's subscription (Chromium's own push
    service is Google's, which this machine cannot reach)."""
    context.add_init_script(
        "(() => { const made = " + json.dumps(subscription) + ";"
        " let current = null;"
        " const wrap = () => ({ endpoint: made.endpoint, toJSON: () => made,"
        "   unsubscribe: () => { current = null; return Promise.resolve(true); } });"
        " if (!self.PushManager) return;"
        " PushManager.prototype.subscribe = function (options) {"
        "   self.subscribedWith = options;"
        "   current = wrap(); return Promise.resolve(current); };"
        " PushManager.prototype.getSubscription = function () {"
        "   return Promise.resolve(current); };"
        "})();"
    )


def service_worker(context: BrowserContext) -> Worker:
    deadline = time.monotonic() + 10
    while not context.service_workers and time.monotonic() < deadline:
        time.sleep(0.05)
    assert context.service_workers, "the desk registered no service worker"
    return context.service_workers[0]


def deliver(worker: Worker, message: dict[str, Any]) -> list[dict[str, Any]]:
    """Delivers a decrypted push to the real service worker; returns what it shows."""
    shown: list[dict[str, Any]] = worker.evaluate(
        """async (message) => {
            const event = new PushEvent("push", { data: JSON.stringify(message) });
            let shown = null;
            event.waitUntil = (promise) => { shown = promise; };
            self.dispatchEvent(event);
            await shown;
            const notes = await self.registration.getNotifications();
            return notes.map((n) => ({ title: n.title, body: n.body, tag: n.tag,
                                       actions: n.actions.map((a) => a.action),
                                       url: n.data.url }));
        }""",
        message,
    )
    return shown


def click(worker: Worker, tag: str, action: str) -> list[dict[str, Any]]:
    """Clicks the notification tagged `tag` (on `action`, or its body for ""); returns
    the notifications shown once the service worker is done."""
    shown: list[dict[str, Any]] = worker.evaluate(
        """async ([tag, action]) => {
            const [note] = await self.registration.getNotifications({ tag });
            const event = new NotificationEvent("notificationclick",
                                                { notification: note, action });
            let done = null;
            event.waitUntil = (promise) => { done = promise; };
            self.dispatchEvent(event);
            await done;
            const notes = await self.registration.getNotifications();
            return notes.map((n) => ({ title: n.title, body: n.body, tag: n.tag }));
        }""",
        [tag, action],
    )
    return shown


def test_a_phone_subscribes_is_told_of_a_waiting_command_and_allows_it_from_the_notification(
    desk: Desk, browser: Browser, tmp_path: Path
) -> None:
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    phone.grant_permissions(["notifications"], origin=desk.proxies["alice"].url)
    stand_in = desk.push.subscribe()
    stub_push_manager(phone, stand_in.to_json())
    page = phone.new_page()
    page.goto(desk.url("alice"))
    manifest = page.evaluate(
        "fetch(document.querySelector('link[rel=manifest]').href,"
        " {credentials: 'include'}).then((r) => r.json())"
    )
    assert manifest["display"] == "standalone" and manifest["start_url"] == "/desk/"
    for icon in manifest["icons"]:
        fetched = page.request.get(desk.url("alice", icon["src"]))
        assert fetched.status == 200 and fetched.headers["content-type"] == "image/png"
    button = page.locator("#notify")
    expect(button).to_have_text("Notify me")
    button.tap()
    expect(page.locator("#notify-status")).to_contain_text("You will be told on this device")
    expect(button).to_have_text("Notifications on")
    key = desk.subscriptions("alice")
    assert [s["endpoint"] for s in key] == [stand_in.endpoint]
    page.screenshot(path=str(tmp_path / "notify-on.png"))

    task_id = desk.send("alice", "ask")
    [received] = desk.push.wait_for(1)
    message = received.message
    assert message["title"] == f"{BOX}: The echo agent wants to run `rm -rf build`"
    assert message["url"] == f"/desk/tasks/{task_id}#ask"
    assert received.headers["urgency"] == "high" and int(received.headers["ttl"]) > 0
    with desk.client("alice") as client:
        assert received.vapid_key == client.get("/desk/push/key").json()["publicKey"]

    worker = service_worker(phone)
    [shown] = deliver(worker, message)
    assert shown["title"] == message["title"] and shown["tag"] == task_id
    assert shown["actions"] == ["allow", "deny"]
    after = click(worker, task_id, "allow")
    assert after and after[0]["title"] == "Allowed from this notification"
    task = desk.wait_state(task_id, "TASK_STATE_COMPLETED")
    said = " ".join(p.get("text", "") for m in task.get("history", []) for p in m.get("parts", []))
    assert f"allowed by {OWNER} from pixel-7 via notification" in said
    phone.close()


def test_a_tap_on_the_notification_opens_the_task_at_its_question(
    desk: Desk, browser: Browser
) -> None:
    """With the desk open, a tap brings it to the task's question. (With none open, the
    worker opens a window; a browser allows that only on a person's real tap, which a
    test's synthetic click is not.)"""
    phone = browser.new_context(viewport=PHONE)
    phone.grant_permissions(["notifications"], origin=desk.proxies["alice"].url)
    stub_push_manager(phone, desk.push.subscribe().to_json())
    page = phone.new_page()
    page.goto(desk.url("alice"))
    page.locator("#notify").click()
    expect(page.locator("#notify-status")).to_contain_text("You will be told on this device")
    expect(page.locator("#notify")).to_have_text("Notifications on")
    task_id = desk.send("alice", "question")
    [received] = desk.push.wait_for(1)
    assert received.message["kind"] == "question" and "token" not in received.message
    assert "asks: Which colour do you prefer?" in received.message["title"]
    worker = service_worker(phone)
    deliver(worker, received.message)
    click(worker, task_id, "")
    page.wait_for_url(re.compile(f"/desk/tasks/{task_id}#ask$"))
    expect(page.locator("section.ask")).to_contain_text("Which colour do you prefer?")
    desk.rpc("CancelTask", {"id": task_id})
    phone.close()


def test_a_permission_reaches_only_those_who_may_approve_it(desk: Desk) -> None:
    """bob may call but not approve: he is not told of his own task's permission prompt
    (alice, the owner, is: she may answer anyone's); he is told of its question."""
    alice, bob = desk.subscribe("alice"), desk.subscribe("bob")
    asked = desk.send("bob", "ask")
    [received] = desk.push.wait_for(1)
    assert received.subscription == alice
    assert received.message["url"] == f"/desk/tasks/{asked}#ask"
    desk.rpc("CancelTask", {"id": asked})
    question = desk.send("bob", "question")
    messages = desk.push.wait_for(3)
    told = {m.subscription for m in messages[1:]}
    assert told == {alice, bob}
    assert all(m.message["url"] == f"/desk/tasks/{question}#ask" for m in messages[1:])
    time.sleep(0.5)  # nothing more comes: one prompt, one message per device
    assert len(desk.push.received) == 3
    desk.rpc("CancelTask", {"id": question})


def test_a_failed_task_is_told_to_the_person_who_started_it(desk: Desk) -> None:
    carol, alice = desk.subscribe("carol"), desk.subscribe("alice")
    failed = desk.send("carol", "boom")
    desk.wait_state(failed, "TASK_STATE_FAILED")
    [received] = desk.push.wait_for(1)
    assert received.subscription == carol
    assert received.message["title"] == f"{BOX}: your task failed"
    assert received.message["url"] == f"/desk/tasks/{failed}"
    time.sleep(0.3)
    assert [r.subscription for r in desk.push.received] == [carol] and alice


def test_the_notification_token_answers_once_and_only_for_its_person(desk: Desk) -> None:
    alices, carols = desk.subscribe("alice"), desk.subscribe("carol")
    task_id = desk.send("carol", "ask")
    by_device = {m.subscription: m.message for m in desk.push.wait_for(2)}
    carol_token = by_device[carols]["token"]
    assert by_device[alices]["token"] != carol_token  # each person's own
    with desk.client("alice") as alice:
        stolen = alice.post("/desk/push/answer", json={"token": carol_token, "action": "allow"})
    assert stolen.status_code == 403 and "another person" in stolen.json()["error"]
    assert desk.state(task_id) == "TASK_STATE_INPUT_REQUIRED"
    with desk.client("carol") as carol:
        denied = carol.post("/desk/push/answer", json={"token": carol_token, "action": "deny"})
        assert denied.status_code == 200, denied.text
        again = carol.post("/desk/push/answer", json={"token": carol_token, "action": "allow"})
        forged = carol.post(
            "/desk/push/answer", json={"token": carol_token[:-2] + "xx", "action": "allow"}
        )
    assert again.status_code == 403 and "already used" in again.json()["error"]
    assert forged.status_code == 403
    task = desk.wait_state(task_id, "TASK_STATE_COMPLETED")
    said = " ".join(p.get("text", "") for m in task["history"] for p in m.get("parts", []))
    assert "denied by carol@example.com from carol-phone via notification" in said
    with desk.client("alice") as alice:  # her own token, for a prompt answered since
        stale = alice.post(
            "/desk/push/answer", json={"token": by_device[alices]["token"], "action": "allow"}
        )
    assert stale.status_code == 409 and "already" in stale.json()["error"], stale.text


def test_subscriptions_survive_a_restart_and_a_gone_one_is_removed(desk: Desk) -> None:
    kept, dropped = desk.subscribe("alice"), desk.subscribe("alice")
    assert len(desk.subscriptions("alice")) == 2
    before = desk.send("alice", "ask:before")
    assert len(desk.push.wait_for(2)) == 2
    desk.server.stop()
    desk.start()
    assert {s["endpoint"].rsplit("/", 1)[1] for s in desk.subscriptions("alice")} == {kept, dropped}
    assert desk.state(before) == "TASK_STATE_INPUT_REQUIRED"  # still waits: told before
    desk.push.gone.add(dropped)
    task_id = desk.send("alice", "ask")
    [_, _, received] = desk.push.wait_for(3)
    assert received.subscription == kept
    assert received.message["url"] == f"/desk/tasks/{task_id}#ask"
    deadline = time.monotonic() + 5
    while len(desk.subscriptions("alice")) > 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [s["endpoint"].rsplit("/", 1)[1] for s in desk.subscriptions("alice")] == [kept]
    assert len(desk.push.received) == 3, [r.message["url"] for r in desk.push.received]
    desk.rpc("CancelTask", {"id": task_id})
    desk.rpc("CancelTask", {"id": before})


def test_a_person_lists_and_removes_their_devices_on_the_notifications_page(
    desk: Desk, browser: Browser
) -> None:
    mine = desk.subscribe("carol")
    desk.subscribe("bob")
    phone = browser.new_context(viewport=PHONE)
    page = phone.new_page()
    shown = page.goto(desk.url("carol", "/desk/notifications"))
    assert (
        shown is not None and "frame-ancestors 'none'" in shown.headers["content-security-policy"]
    )
    devices = page.locator(".device")
    expect(devices).to_have_count(1)  # bob's is not carol's to see
    expect(devices.first.locator(".device-name")).to_have_text("carol-phone")
    devices.first.get_by_role("button", name="Remove").click()
    expect(page.locator(".device")).to_have_count(0)
    expect(page.locator(".empty")).to_contain_text("No device is told yet")
    assert desk.subscriptions("carol") == [] and len(desk.subscriptions("bob")) == 1
    assert mine not in {r.subscription for r in desk.push.received}
    phone.close()


def test_a_busy_push_service_is_retried_and_logged_once(desk: Desk) -> None:
    busy = desk.subscribe("alice")
    desk.push.busy[busy] = 2
    task_id = desk.send("alice", "ask")
    [received] = desk.push.wait_for(1, seconds=15)
    assert received.subscription == busy
    warnings = [line for line in desk.server.log().splitlines() if "failed: 503" in line]
    assert len(warnings) == 1, warnings
    assert "retrying with backoff" in warnings[0]
    desk.rpc("CancelTask", {"id": task_id})


def test_a_subscription_must_name_a_push_service_and_come_with_the_pages_token(
    desk: Desk,
) -> None:
    browser = desk.push.subscribe().to_json()
    with desk.client("alice") as client:
        token = client.get("/desk/push/key").json()["token"]
        elsewhere = dict(browser, endpoint="http://100.64.0.3:8080/steal")
        refused = client.post(
            "/desk/push/subscriptions", json={"subscription": elsewhere, "token": token}
        )
        assert refused.status_code == 400 and "push service" in refused.json()["error"]
        no_token = client.post("/desk/push/subscriptions", json={"subscription": browser})
        assert no_token.status_code == 403
        bad_key = dict(browser, keys={"p256dh": "AAAA", "auth": browser["keys"]["auth"]})
        refused = client.post(
            "/desk/push/subscriptions", json={"subscription": bad_key, "token": token}
        )
        assert refused.status_code == 400 and "P-256" in refused.json()["error"]
    with desk.client("bob") as bob:
        bobs = bob.get("/desk/push/key").json()["token"]
    with desk.client("alice") as client:
        theirs = client.post(
            "/desk/push/subscriptions", json={"subscription": browser, "token": bobs}
        )
    assert theirs.status_code == 403
    assert desk.subscriptions("alice") == []


def test_on_plain_http_at_a_tailnet_name_notify_me_says_why_and_how_to_get_https(
    desk: Desk, browser: Browser
) -> None:
    """A phone that opens http://devbox/desk/ has no secure context: no service worker,
    no push. The button says so, and names the way to HTTPS."""
    named = browser.browser_type.launch(
        executable_path=CHROMIUM, args=[*FLAGS, "--host-resolver-rules=MAP devbox 127.0.0.1"]
    )
    try:
        page = named.new_page(viewport=PHONE)
        page.goto(f"http://devbox:{desk.proxies['alice'].port}/desk/")
        assert page.evaluate("window.isSecureContext") is False
        page.locator("#notify").click()
        status = page.locator("#notify-status")
        expect(status).to_contain_text("Notifications need HTTPS")
        expect(status).to_contain_text("tailscale serve")
        expect(status).to_contain_text("--tsnet")
        height = page.locator("nav").evaluate("el => el.getBoundingClientRect().height")
        assert height < 80, f"the top bar grew to {height}px"
    finally:
        named.close()


def test_a_person_whose_grant_is_removed_after_subscribing_is_told_nothing_and_dropped(
    desk: Desk,
) -> None:
    """Carol is an admin by a grant, so she is told of alice's prompts. Her grant goes
    between her subscribing and the next prompt: she is let in no more, so that prompt
    (its command, its first line, its Allow token) reaches alice alone, and carol's
    device is dropped rather than asked about at every prompt."""
    alices = desk.subscribe("alice")
    try:
        desk.grant("admin")
        carols = desk.subscribe("carol")
        before = desk.send("alice", "ask")
        told = {m.subscription: m.message for m in desk.push.wait_for(2)}
        assert set(told) == {alices, carols} and told[carols]["token"]
        desk.rpc("CancelTask", {"id": before})
        desk.grant()
        with desk.client("carol") as carol:
            assert carol.get("/desk/push/key").status_code == 403
        after = desk.send("alice", "ask")
        [received] = desk.push.wait_for(3)[2:]
        assert received.subscription == alices
        assert received.message["url"] == f"/desk/tasks/{after}#ask"
        time.sleep(0.5)  # nothing reaches carol's phone
        assert len(desk.push.received) == 3
        assert (
            "push subscription of user:carol@example.com on carol-phone dropped: login "
            "carol@example.com is not in access.allowed_logins" in desk.server.log()
        )
        desk.rpc("CancelTask", {"id": after})
        desk.grant("caller", "approver")  # let in again: her device is no longer kept
        assert desk.subscriptions("carol") == []
    finally:
        desk.grant("caller", "approver")


def test_a_prompt_reaches_a_device_by_its_persons_roles_now_not_when_it_subscribed(
    desk: Desk,
) -> None:
    """Carol subscribes as an approver; her grant then makes her a caller only, and her
    own permission prompt reaches only alice (the owner may answer anyone's). Her
    device is kept (she is still let in), and told again once she approves again."""
    alices, carols = desk.subscribe("alice"), desk.subscribe("carol")
    try:
        desk.grant("caller")
        asked = desk.send("carol", "ask")
        [received] = desk.push.wait_for(1)
        assert received.subscription == alices
        time.sleep(0.5)
        assert len(desk.push.received) == 1
        assert [s["device"] for s in desk.subscriptions("carol")] == ["carol-phone"]
        desk.rpc("CancelTask", {"id": asked})
        desk.grant("caller", "approver")
        again = desk.send("carol", "ask")
        told = {m.subscription for m in desk.push.wait_for(3)[1:]}
        assert told == {alices, carols}
        desk.rpc("CancelTask", {"id": again})
    finally:
        desk.grant("caller", "approver")


@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_a_notification_answer_used_once_is_refused_after_a_restart(
    desk: Desk, store: str, tmp_path: Path
) -> None:
    """Spent answers are kept in the store (SQLite, or a PostgreSQL one) until their
    token expires: a restart does not make a used Deny good again."""
    if store == "postgresql" and NO_POSTGRES is not None:
        pytest.skip(NO_POSTGRES)
    with contextlib.ExitStack() as stack:
        if store == "postgresql":
            postgres = stack.enter_context(running_postgres())
            desk = stack.enter_context(beside(desk, tmp_path, "--store", postgres.url))
        desk.subscribe("carol")
        task_id = desk.send("carol", "ask")
        [received] = desk.push.wait_for(1)
        token = received.message["token"]
        assert desk.answer("carol", token, "deny").status_code == 200
        desk.wait_state(task_id, "TASK_STATE_COMPLETED")
        desk.server.stop()
        desk.start(*(["--store", postgres.url] if store == "postgresql" else []))
        again = desk.answer("carol", token, "allow")
        assert again.status_code == 403, again.text
        assert "already used" in again.json()["error"]


def test_a_tokens_device_is_told_while_the_token_lasts_and_dropped_once_it_is_revoked(
    desk: Desk,
) -> None:
    """A subscription made with a bearer token (no tailnet device to ask about) follows
    the token: an admin token's device is told of alice's prompt; revoked, it is not,
    and it is forgotten."""
    alices = desk.subscribe("alice")
    token = add_token(desk.server, "phone-bot", "caller", "approver", "admin")
    bot = httpx.Client(
        base_url=desk.server.url,
        headers={"Origin": desk.server.url, "Authorization": f"Bearer {token}"},
        timeout=10,
    )
    with bot:
        browser = desk.push.subscribe()
        key = bot.get("/desk/push/key").json()["token"]
        made = bot.post(
            "/desk/push/subscriptions", json={"subscription": browser.to_json(), "token": key}
        )
        assert made.status_code == 201, made.text
        first = desk.send("alice", "ask")
        assert {m.subscription for m in desk.push.wait_for(2)} == {alices, browser.id}
        desk.rpc("CancelTask", {"id": first})
        revoked = tailagent(
            "token", "revoke", "phone-bot", "--state-dir", str(desk.server.state_dir)
        )
        assert revoked.returncode == 0, revoked.stderr
        second = desk.send("alice", "ask")
        [received] = desk.push.wait_for(3)[2:]
        assert received.subscription == alices
        time.sleep(0.5)
        assert len(desk.push.received) == 3
        assert (
            "push subscription of token:phone-bot on this box dropped: the token "
            "'phone-bot' was revoked" in desk.server.log()
        )
        desk.rpc("CancelTask", {"id": second})
