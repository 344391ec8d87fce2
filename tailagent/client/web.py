"""`tailagent web`: the approval desk's address, and a sign-in link for this box.

On the tailnet the page needs no sign-in (whois names every browser), so this
command matters for a browser on the box itself: it asks the running server, with
the local token that only the owner can read, for a link that works once and for a
few minutes, the way Jupyter prints its token URL. The link counts only for the
unix user who ran this command (the server binds it to the owner of the asking
connection).

`--open` never puts the link on a command line, where `/proc/*/cmdline` shows it to
every user of the box: the browser is handed a private page (0600, in a directory of
its own, 0700) that forwards to the link, as Jupyter does.
"""

from __future__ import annotations

import argparse
import html
import sys
import tempfile
import webbrowser
from pathlib import Path

from tailagent.client.connect import Target, open_http
from tailagent.client.errors import Refused, UsageError, run_command
from tailagent.statedir.files import write_private


async def _link(target: Target, args: argparse.Namespace) -> int:
    if target.socket is not None:
        raise UsageError(
            f"the server listens on {target.url}, which a browser cannot open; open the "
            "page through the tailnet (https://<this node>/desk/, after `tailscale serve`), "
            "or run the server on a loopback port too"
        )
    if not target.local:
        print(f"open {target.base}/desk/ in a browser on the tailnet: no sign-in needed there")
        return 0
    if target.token(args.token) is None:
        raise UsageError(
            "no local token to sign in with: start `tailagent serve` first (it makes one), "
            "and run this as the same user, with the same --state-dir"
        )
    async with open_http(target, args.token) as http:
        response = await http.post(f"{target.base}/desk/signin-link", json={})
    if response.status_code != 200:
        try:
            detail = response.json().get("error") or response.json().get("reason")
        except ValueError:
            detail = response.text.strip()[:200]
        raise Refused(f"{target.url} refused a sign-in link: {response.status_code} {detail}")
    url = f"{target.base}{response.json()['path']}"
    print("Open this link in a browser on this box (it works once, for 5 minutes):")
    print(url)
    if args.open and not webbrowser.open(forwarding_page(url).as_uri()):
        print("tailagent: no browser could be opened here; copy the link", file=sys.stderr)
    return 0


def forwarding_page(url: str) -> Path:
    """A page only this user can read, which sends its browser on to `url`."""
    link = html.escape(url, quote=True)
    page = Path(tempfile.mkdtemp(prefix="tailagent-web-")) / "signin.html"
    write_private(
        page,
        f'<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
        f'<meta http-equiv="refresh" content="0;url={link}"><title>tailagent</title>'
        f'<p><a href="{link}">Open the approval desk</a></p>\n',
    )
    return page


def web_command(args: argparse.Namespace) -> int:
    async def run(target: Target) -> int:
        return await _link(target, args)

    return run_command(args.url, args.state_dir, run)
