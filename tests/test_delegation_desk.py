"""A peer's question reaches the person on box A's desk and phone, and her answer from
there goes back to box B as hers (issue 45, item 3), in a real Chromium.

Two real servers on loopback: devbox-1 (A) and devbox-2 (B) (tests/two_boxes.py).
A's fake tailscaled also names alice's phone, whose browser reaches A's desk through its
stand-in for `tailscale serve` (tests/serve_proxy.py), so the desk knows her with no
sign-in and her turns get the delegation tools. Her push subscription is at the stand-in
push service (tests/push_service.py), which decrypts what A sends as a browser would.
`TAILAGENT_SCREENSHOTS=<dir>` keeps the phone screenshot there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.browser import PHONE
from tests.push_service import PushService
from tests.serve_proxy import ServeProxy
from tests.tailnet import whois
from tests.test_desk import start_task
from tests.test_desk_push import Desk
from tests.test_real_tailnet import audit_rows
from tests.two_boxes import ALICE, Boxes, port_of, start_boxes

PHONE_IP = "100.64.0.2"  # alice's phone, as A's tailscaled names it
SCREENSHOTS = os.environ.get("TAILAGENT_SCREENSHOTS")
HAND_OFF = "delegate:devbox-2 ask:cleanup"
RELAYED = "devbox-2's agent asks to run `rm -rf cleanup`"


@pytest.fixture(scope="module")
def boxes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Desk, Boxes]]:
    """A (alice's desk, with push) and B (which lets devbox-1 hand it alice's work)."""
    tmp = tmp_path_factory.mktemp("delegation-desk")
    push = PushService()
    a_sections = (
        f'[access]\nallowed_logins = ["{ALICE}"]\n[desk]\npush_services = ["{push.origin}"]\n'
    )
    pair = start_boxes(
        tmp, a_sections=a_sections, a_callers={PHONE_IP: whois(ALICE, name="pixel-7", ip=PHONE_IP)}
    )
    phone = ServeProxy(port_of(pair.a), PHONE_IP).start()
    desk = Desk(tmp / "a", pair.fakes[0], push, pair.a, {"alice": phone})
    yield desk, pair
    phone.stop()
    pair.stop()
    push.stop()


def new_rows(pair: Boxes, before: int) -> list[dict[str, str]]:
    """B's audit rows written since it had `before` of them."""
    return audit_rows(pair.b)[before:]


def test_on_her_phone_alice_allows_the_hand_off_and_b_s_question_on_a_s_desk(
    boxes: tuple[Desk, Boxes], browser: Browser, tmp_path: Path
) -> None:
    desk, pair = boxes
    on_b_before = len(audit_rows(pair.b))
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = phone.new_page()
    task_id = start_task(page, desk, "alice", HAND_OFF)  # type: ignore[arg-type]
    ask = page.locator("section.ask")
    expect(ask.locator("h2")).to_contain_text(f"Hand to devbox-2: {HAND_OFF.split(' ', 1)[1]}")
    ask.get_by_role("button", name="Hand it over", exact=True).tap()
    expect(ask.locator("h2")).to_contain_text(RELAYED.replace("`", ""))
    expect(ask.locator(".cwd")).to_have_text("devbox-2, in its own workspace")  # not A's
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the page scrolls sideways: {width}px"
    shot = Path(SCREENSHOTS or tmp_path) / "desk-delegated-question.png"
    page.screenshot(path=str(shot), full_page=True)
    ask.get_by_role("button", name="Allow", exact=True).tap()
    expect(page.locator(".task-head .state")).to_have_text("completed", timeout=30_000)
    expect(page.locator(".answer")).to_contain_text(f"echo: {HAND_OFF.split(' ', 1)[1]}")
    asked = page.locator(".item.asked").last
    expect(asked).to_have_text("devbox-2's agent asked to run rm -rf cleanup")
    desk.wait_state(task_id, "TASK_STATE_COMPLETED")
    phone.close()

    # B: the person's answer, given on A's desk, recorded as alice's through devbox-1.
    [on_b] = new_rows(pair, on_b_before)
    assert on_b["decision"] == "allow", on_b
    assert on_b["answered_by"].startswith(f"user:{ALICE}"), on_b
    assert "via devbox-1" in on_b["answered_by"], on_b
    # A: both of alice's answers, each given on the desk (the web) from her phone.
    on_a = [r for r in audit_rows(desk.server) if r["task_id"] == task_id]
    assert [r["decision"] for r in on_a] == ["allow", "allow"], on_a
    for row in on_a:
        assert row["answered_by"].startswith(f"user:{ALICE}"), row
        assert row["answered_by"].endswith("on pixel-7 via web"), row


def test_b_s_question_reaches_alice_s_phone_as_a_push_and_her_allow_there_goes_to_b(
    boxes: tuple[Desk, Boxes],
) -> None:
    desk, pair = boxes
    desk.push.received.clear()
    on_b_before = len(audit_rows(pair.b))
    desk.subscribe("alice")
    task_id = desk.send("alice", HAND_OFF)
    [hand_off] = desk.push.wait_for(1)
    assert "Hand to devbox-2" in hand_off.message["title"], hand_off.message
    assert desk.answer("alice", hand_off.message["token"], "allow").status_code == 200
    relayed = desk.push.wait_for(2, seconds=30)[1].message
    assert relayed["url"] == f"/desk/tasks/{task_id}#ask"
    assert relayed["title"] == "devbox-1: devbox-2's agent wants to run `rm -rf cleanup`"
    assert desk.answer("alice", relayed["token"], "allow").status_code == 200
    desk.wait_state(task_id, "TASK_STATE_COMPLETED", seconds=30)
    # One push per prompt: none for the moments an answer is on its way.
    assert [r.message["title"] for r in desk.push.received] == [
        hand_off.message["title"], relayed["title"]]  # fmt: skip
    [on_b] = new_rows(pair, on_b_before)
    assert on_b["decision"] == "allow" and on_b["answered_by"].startswith(f"user:{ALICE}")
    assert "via devbox-1" in on_b["answered_by"], on_b
