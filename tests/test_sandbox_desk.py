"""The desk says so on every page when agents run unfenced (`sandbox.mode = "off"`), in a
real Chromium at a phone's size, and says nothing of the kind when they are fenced.
`TAILAGENT_SCREENSHOTS=<dir>` keeps the screenshot there."""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import Browser, expect

from tests.browser import PHONE
from tests.test_desk_access import signin_link
from tests.test_sandbox import start_fenced


def test_the_desk_says_agents_run_unfenced_and_only_then(browser: Browser, tmp_path: Path) -> None:
    for mode in ("off", "on"):
        server = start_fenced(tmp_path / mode, f'[sandbox]\nmode = "{mode}"\n')
        context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
        try:
            page = context.new_page()
            page.goto(signin_link(server))
            expect(page.locator("nav.bar")).to_be_visible()
            banner = page.locator(".unfenced")
            if mode == "on":
                expect(banner).to_have_count(0)
                continue
            expect(banner).to_be_visible()
            expect(banner).to_contain_text("Agents run with no sandbox here")
            box = banner.bounding_box()
            assert box is not None and box["width"] <= PHONE["width"]  # no sideways scroll
            folder = Path(os.environ.get("TAILAGENT_SCREENSHOTS") or tmp_path)
            page.screenshot(path=str(folder / "desk-unfenced.png"), full_page=True)
        finally:
            context.close()
            server.stop()
