"""A desk sign-in is its maker's: the attacks of issue 31 (part 3), each through a
real server, the real `tailagent web`, and a real second Unix user (`runuser -u
nobody`, with curl) where the attack is another user's.

Cookies ignore ports, so every listener on the box receives the desk's cookie; a
sign-in link is on the owner's screen and may be on a command line. Neither may let
anyone but the user who asked for it in.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.conftest import RunningServer, start_server
from tests.test_access import needs_runuser
from tests.test_desk_access import owner_link, signed_in, signin_link
from tests.warm_start import cli_run

NOBODY_UID = 65534


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("desk-signin")
    server = start_server(tmp, "--tailscale-socket", str(tmp / "no-tailscaled.sock"))
    yield server
    server.stop()


def as_nobody(*curl: str) -> tuple[int, str]:
    """curl run by uid `nobody`: the status and body of its answer."""
    done = subprocess.run(
        ["runuser", "-u", "nobody", "--", "curl", "-s", "-w", "\n%{http_code}", *curl],
        capture_output=True,
        text=True,
        timeout=30,
    )
    body, _, status = done.stdout.rpartition("\n")
    return int(status), body


def cookie_of(client: httpx.Client) -> str:
    return "; ".join(f"{name}={value}" for name, value in client.cookies.items())


def a2a_state(server: RunningServer, task_id: str) -> str:
    reply = httpx.post(
        f"{server.url}/",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}},
        headers={"A2A-Version": "1.0", "Authorization": f"Bearer {server.token}"},
    )
    return str(reply.json()["result"]["status"]["state"])


def waiting_task(server: RunningServer, client: httpx.Client) -> tuple[str, dict[str, str]]:
    """The owner starts `ask` (a `rm -rf build` prompt) from the desk; returns the task
    and the owner's own answer form, Allow chosen."""
    page = client.get("/desk/").text
    token = re.search(r'name="token" value="([^"]+)"', page)
    assert token is not None
    same = {"Origin": server.url, "Sec-Fetch-Site": "same-origin"}
    sent = client.post("/desk/tasks", data={"token": token.group(1), "text": "ask"}, headers=same)
    assert sent.status_code == 303
    task_id = sent.headers["location"].rsplit("/", 1)[1]
    deadline = time.monotonic() + 15
    while a2a_state(server, task_id) != "TASK_STATE_INPUT_REQUIRED":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    ask = client.get(f"/desk/tasks/{task_id}").text
    assert "rm -rf build" in ask
    return task_id, allow_form(ask)


def allow_form(page: str) -> dict[str, str]:
    """A task page's answer form as posted with Allow chosen: its token, request, choice."""
    answer = re.search(
        r'action="[^"]+/answer".*?name="token" value="([^"]+)".*?name="requestId" value="([^"]+)"'
        r'.*?name="choice" value="([^"]+)" class="allow"',
        page,
        re.S,
    )
    assert answer is not None, page
    token, request_id, choice = answer.groups()
    return {"token": token, "requestId": request_id, "choice": choice}


def posted(form: dict[str, str]) -> list[str]:
    return [arg for key, value in form.items() for arg in ("--data-urlencode", f"{key}={value}")]


@needs_runuser
def test_another_users_replay_of_the_cookie_approves_nothing(local: RunningServer) -> None:
    with signed_in(local) as client:
        task_id, form = waiting_task(local, client)
        cookie = cookie_of(client)
        same = ["-H", f"Origin: {local.url}", "-H", "Sec-Fetch-Site: same-origin"]
        status, page = as_nobody("-b", cookie, f"{local.url}/desk/")
        assert status == 403, page
        assert f"uid {NOBODY_UID}" in page
        answer = f"{local.url}/desk/tasks/{task_id}/answer"
        status, page = as_nobody("-b", cookie, *same, *posted(form), answer)
        assert status == 403, page
        assert a2a_state(local, task_id) == "TASK_STATE_INPUT_REQUIRED"
        # The owner's own browser still answers.
        own = {"Origin": local.url, "Sec-Fetch-Site": "same-origin"}
        assert client.post(answer, data=form, headers=own).status_code == 303
    refused = [line for line in local.log().splitlines() if "desk sign-in" in line]
    assert any("uid 0" in line and f"uid {NOBODY_UID}" in line for line in refused), refused


@needs_runuser
def test_another_users_use_of_the_link_signs_nobody_in(local: RunningServer) -> None:
    link = signin_link(local)
    status, page = as_nobody("-o", "/dev/null", "-D", "-", link)
    assert status == 403, page
    assert "set-cookie" not in page.lower()
    assert any(
        "sign-in link" in line and f"uid {NOBODY_UID}" in line for line in local.log().splitlines()
    )
    # The link is still the owner's: refused to another user, not spent.
    with httpx.Client(base_url=local.url) as owner:
        assert owner.get(link).status_code == 303
        assert owner.get("/desk/").status_code == 200


@needs_runuser
def test_a_link_asked_for_by_another_user_is_that_users_alone(local: RunningServer) -> None:
    # nobody holds the local token here (on purpose): the link it asks for is bound to it.
    status, body = as_nobody(
        "-X", "POST", "-H", f"Authorization: Bearer {local.token}", "-H",
        "Content-Type: application/json", "-d", "{}", f"{local.url}/desk/signin-link",
    )  # fmt: skip
    assert status == 200, body
    link = local.url + httpx.Response(200, content=body).json()["path"]
    with httpx.Client(base_url=local.url) as owner:
        assert owner.get(link).status_code == 403  # root's browser: not the asker
    status, headers = as_nobody("-o", "/dev/null", "-D", "-", link)
    assert status == 303
    cookie = re.search(r"(?im)^set-cookie: ([^;]+)", headers)
    assert cookie is not None
    assert as_nobody("-o", "/dev/null", "-b", cookie.group(1), f"{local.url}/desk/")[0] == 200
    assert httpx.get(f"{local.url}/desk/", headers={"Cookie": cookie.group(1)}).status_code == 403


def web_open(server: RunningServer, tmp: Path) -> tuple[str, str]:
    """`tailagent web --open` with a browser that only writes down its command line;
    returns what the command printed and the one argument the browser was given."""
    seen, browser = tmp / "argv", tmp / "browser"
    browser.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {seen}\n')
    browser.chmod(0o755)
    done = cli_run(
        [sys.executable, "-m", "tailagent", "web", "--open", "--state-dir", str(server.state_dir)],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "BROWSER": str(browser)},
    )
    assert done.returncode == 0, done.stderr
    (opened,) = seen.read_text().split()
    return done.stdout, opened


def test_tailagent_web_open_puts_no_ticket_on_a_command_line(
    local: RunningServer, tmp_path: Path
) -> None:
    printed, opened = web_open(local, tmp_path)
    ticket = re.search(r"ticket=(\S+)", printed)
    assert ticket is not None, printed
    assert ticket.group(1) not in opened
    page = Path(urlsplit(opened).path)
    assert stat.S_IMODE(page.stat().st_mode) == 0o600
    assert stat.S_IMODE(page.parent.stat().st_mode) == 0o700
    assert page.parent.stat().st_uid == os.geteuid()
    assert ticket.group(1) in page.read_text()  # the page forwards to the link


def test_the_page_that_open_opens_signs_a_real_browser_in(
    local: RunningServer, browser: Browser, tmp_path: Path
) -> None:
    _, opened = web_open(local, tmp_path)
    context = browser.new_context()
    page = context.new_page()
    page.goto(opened)
    page.wait_for_url(f"{local.url}/desk/")
    expect(page.locator(".viewer")).to_have_text("this box's owner")
    context.close()


def test_two_servers_on_one_box_keep_their_own_cookies(
    local: RunningServer, tmp_path: Path, browser: Browser
) -> None:
    second = start_server(tmp_path, "--tailscale-socket", str(tmp_path / "none.sock"))
    try:
        context = browser.new_context()
        page = context.new_page()
        page.goto(owner_link(local))
        page.goto(owner_link(second))
        for server in (local, second):
            page.goto(f"{server.url}/desk/")
            expect(page.locator(".viewer")).to_have_text("this box's owner")
        assert len(context.cookies()) == 2
        context.close()
    finally:
        second.stop()


def test_only_the_pages_own_origin_may_post(local: RunningServer) -> None:
    port = urlsplit(local.url).port
    with signed_in(local) as client:
        token = re.search(r'name="token" value="([^"]+)"', client.get("/desk/").text)
        assert token is not None
        form = {"token": token.group(1), "text": "from another origin"}
        for headers in (
            {"Origin": f"http://127.0.0.1:{port + 1}"},  # another port: another origin
            {"Origin": f"https://127.0.0.1:{port}"},  # another scheme
            {"Authorization": "Bearer not-a-token"},  # no Origin, and no valid token
            {"Authorization": "Basic b3duZXI6cGFzcw=="},
        ):
            refused = client.post("/desk/tasks", data=form, headers=headers)
            assert refused.status_code in (401, 403), headers
        sent = client.post("/desk/tasks", data=form, headers={"Origin": local.url})
        assert sent.status_code == 303


def test_where_the_kernel_cannot_name_the_user_no_link_is_made(tmp_path: Path) -> None:
    # On a unix socket Hypercorn hands the app no socket to ask: a link would be anyone's.
    server = start_server(tmp_path, listen=f"unix:{tmp_path / 'agent.sock'}")
    try:
        transport = httpx.HTTPTransport(uds=str(tmp_path / "agent.sock"))
        with httpx.Client(transport=transport, base_url="http://localhost") as client:
            asked = client.post(
                "/desk/signin-link", json={}, headers={"Authorization": f"Bearer {server.token}"}
            )
    finally:
        server.stop()
    assert asked.status_code == 403
    assert "cannot tell which user" in asked.json()["error"]
