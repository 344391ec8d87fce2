"""HTML for the page, from Jinja templates with autoescaping on everything.

One renderer serves both the first page and the live updates: an entry pushed over
SSE is the same fragment the server would have put in the page, so what a person
sees never depends on whether it came live or with a reload. Everything the agent
or a caller wrote passes through autoescaping; nothing is marked safe.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from tailagent.access.identity import Caller
from tailagent.web import diffs
from tailagent.web.transcript import Entry


def _pretty(value: Any) -> str:
    """A tool input or output, whole and readable (escaping happens after)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _clock(iso: str) -> str:
    """HH:MM:SS UTC of an ISO timestamp (the script shows local time instead)."""
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).strftime("%H:%M:%S UTC")
    except ValueError:
        return iso


def _person(who: str) -> str:
    """A requester as people say it: the local token is this box's owner."""
    return "this box's owner" if who == "token:local" else who


_ENV = Environment(
    loader=PackageLoader("tailagent.web", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["pretty"] = _pretty
_ENV.filters["clock"] = _clock
_ENV.filters["person"] = _person
_ENV.globals["parse_diff"] = diffs.parse


@dataclass(frozen=True)
class Viewer:
    """The person a page is rendered for: what it may do, and its form tokens."""

    caller: Caller
    token: Callable[[str, str], str]  # (action, task id) -> form token
    workspace: str

    @property
    def name(self) -> str:
        c = self.caller
        if c.kind == "tagged":
            who = ", ".join(c.tags)
        elif c.kind == "token":
            who = "this box's owner" if c.login == "local" else f"token {c.login}"
        else:
            who = c.login
        device = c.node.split(".")[0]  # the node's short MagicDNS name, as people say it
        return f"{who} from {device}" if device else who

    @property
    def approver(self) -> bool:
        return self.caller.may("approver")

    @property
    def admin(self) -> bool:
        return self.caller.may("admin")


def page(name: str, viewer: Viewer, **context: Any) -> str:
    return _ENV.get_template(name).render(viewer=viewer, **context)


def entry(item: Entry, viewer: Viewer) -> str:
    macro = _ENV.get_template("entries.html").module.entry  # type: ignore[attr-defined]
    return str(macro(item, viewer)).strip()


def refusal(message: str, back: str) -> str:
    """A refused form or link, said plainly, with the way back."""
    return outcome("Refused", message, back)


def outcome(title: str, message: str, back: str, *, go_on: bool = False) -> str:
    """What a form came to, said plainly, with the way back (taken at once, `go_on`)."""
    return _ENV.get_template("refused.html").render(
        title=title, message=message, back=back, go_on=go_on
    )
