"""A real Chromium for the page's tests: Debian's package, driven by Playwright.

Playwright's own browser download cannot reach its host from these machines, so the
tests launch /usr/bin/chromium (`.ci/run` installs it). The flags keep it from
calling out to Google's services, which this closed network refuses.
"""

from __future__ import annotations

import shutil

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PHONE = {"width": 390, "height": 844}
