"""`tailagent web`: the approval desk's address, and a sign-in link for this box.

On the tailnet the page needs no sign-in (whois names every browser), so this
command matters for a browser on the box itself: it asks the running server, with
the local token that only the owner can read, for a link that works once and for a
few minutes, the way Jupyter prints its token URL.
"""

from __future__ import annotations

import argparse
import sys
import webbrowser

from tailagent.client.connect import Target, open_http
from tailagent.client.errors import Refused, UsageError, run_command


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
    if args.open and not webbrowser.open(url):
        print("tailagent: no browser could be opened here; copy the link", file=sys.stderr)
    return 0


def web_command(args: argparse.Namespace) -> int:
    async def run(target: Target) -> int:
        return await _link(target, args)

    return run_command(args.url, args.state_dir, run)
