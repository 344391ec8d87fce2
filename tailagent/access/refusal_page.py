"""The page a person reads when the access layer turns a desk request away.

The guard answers before the desk's app runs, so this page cannot come from the desk's
templates; it still has to look like the desk and speak to whoever holds the browser,
often a phone: the one thing to do first, in plain words, and the access layer's own
reason (tailscaled, tokens, settings) kept in a "Details" part for whoever runs the
server. Its stylesheet is the desk's, which the guard serves to anyone (PUBLIC_PATHS):
the same file for everyone, with nothing in it about anyone.
"""

from __future__ import annotations

import html

STYLESHEET = "/desk/static/desk.css"
# The page loads the desk's stylesheet and nothing else: no script, no image, no frame.
CSP = b"default-src 'none'; style-src 'self'; frame-ancestors 'none'"

SIGN_IN_TITLE = "Sign in to the approval desk"
SIGN_IN_WORDS = (
    "<p>This desk knows you by your Tailscale account, and this browser did not come "
    "with one it could check.</p>"
    "<p><strong>On a phone or another computer:</strong> switch Tailscale on, signed in "
    "to the same tailnet as the server, and open the desk at the address you were "
    "given.</p>"
    "<p><strong>On the computer that runs tailagent:</strong> run "
    "<code>tailagent web</code> in a terminal there and open the link it prints "
    "(<code>tailagent web --open</code> opens it for you). The link works once, for a "
    "few minutes.</p>"
)


def refusal_page(status: int, title: str, reason: str) -> bytes:
    """The whole page: for a 401 (no identity), how to sign in, the reason under
    Details; for any other refusal, its title and its reason, which already name what
    to change."""
    if status == 401:
        heading, body = SIGN_IN_TITLE, f'<div class="refusal signin">{SIGN_IN_WORDS}</div>'
        body += (
            f'<details class="why"><summary>Details</summary><p>{html.escape(reason)}</p></details>'
        )
    else:
        heading = title[:1].upper() + title[1:]
        body = f'<div class="refusal"><p>{html.escape(reason)}</p></div>'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(heading)} · tailagent</title>"
        f'<link rel="stylesheet" href="{STYLESHEET}"></head><body>'
        '<nav class="bar"><a href="/desk/" class="home">tailagent</a></nav>'
        f"<main><h1>{html.escape(heading)}</h1>{body}</main></body></html>"
    ).encode()
