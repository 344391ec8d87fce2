"""HTML for the page, from Jinja templates with autoescaping on everything.

One renderer serves both the first page and the live updates: an entry pushed over
SSE is the same fragment the server would have put in the page, so what a person
sees never depends on whether it came live or with a reload. Everything the agent
or a caller wrote passes through autoescaping; the only markup made from their text
is markdown.py's, which escapes first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape

from tailagent.access.identity import Caller
from tailagent.sandbox.fences import FenceReport
from tailagent.web.views import diffs, markdown
from tailagent.web.views.transcript import Entry

CLIP_CHARS = 2_000  # of a prompt, a tool's input or output: the rest is one tap away
ANSWER_CHARS = 20_000  # of an answer, rendered as Markdown; past it, plain text
_UTC_CLOCK = re.compile(r"\b(\d{2}):(\d{2}):(\d{2}) UTC\b")


def _pretty(value: Any) -> str:
    """A tool input or output, whole and readable (escaping happens after)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _clock(iso: str) -> str:
    """HH:MM UTC of an ISO timestamp: what a page shows without its script, which
    puts the reader's local time in its place."""
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).strftime("%H:%M UTC")
    except ValueError:
        return iso


def _size(text: str) -> str:
    """How long a clipped text is, as a person reads it."""
    count = len(text)
    if count < 10_000:
        return f"{count:,} characters"
    return f"{count / 1000:,.0f} thousand characters" if count < 1e6 else f"{count / 1e6:.1f} MB"


def name_of(who: str, device: str, viewer: Caller | None = None) -> str:
    """A person, named the same way on every part of the page: "You" for the viewer,
    else as decisions are signed (`alice@example.com from pixel-7`), the local token as
    this box's owner. `who` is a decision's `answeredBy` or a task's requester."""
    if viewer is not None and who == viewer.who:
        return "You"
    if who == "token:local":
        name = "this box's owner"
    elif who.startswith("token:"):
        name = "token " + who.removeprefix("token:")
    else:
        name = who
    return f"{name} from {device}" if device else name


def local_times(message: str) -> Markup:
    """A message with its `HH:MM:SS UTC` times (the bridge's refusals say them so) as
    <time> elements the page's script shows in local time; the rest escaped."""
    now = datetime.now(UTC)
    pieces: list[str] = []
    last = 0
    for match in _UTC_CLOCK.finditer(message):
        hour, minute, second = (int(g) for g in match.groups())
        if hour > 23 or minute > 59 or second > 59:
            continue
        moment = now.replace(hour=hour, minute=minute, second=second, microsecond=0)
        if moment > now + timedelta(minutes=5):  # said yesterday, read after midnight
            moment -= timedelta(days=1)
        pieces.append(str(escape(message[last : match.start()])))
        pieces.append(f'<time datetime="{moment.isoformat()}">{escape(match.group(0))}</time>')
        last = match.end()
    pieces.append(str(escape(message[last:])))
    return Markup("".join(pieces))


_ENV = Environment(
    loader=PackageLoader("tailagent.web", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["pretty"] = _pretty
_ENV.filters["clock"] = _clock
_ENV.filters["size"] = _size
_ENV.filters["md"] = markdown.render
_ENV.filters["inline"] = markdown.inline
_ENV.globals["parse_diff"] = diffs.parse
_ENV.globals["split_diff"] = diffs.per_file
_ENV.globals["zip"] = zip
_ENV.globals["CLIP_CHARS"] = CLIP_CHARS
_ENV.globals["ANSWER_CHARS"] = ANSWER_CHARS


@dataclass(frozen=True)
class Viewer:
    """The person a page is rendered for (what it may do, its form tokens), and what the
    page knows of the task's conversation beyond the task itself: the directory its
    commands run in, what became of its branch (`branch_note`: merged, discarded, or
    why there is nothing to merge), and what a merge would bring (`merge`: a merge's dry
    run, its stat, bounded diff and the tip the merge is to take)."""

    caller: Caller
    token: Callable[[str, str], str]  # (action, task id) -> form token
    workspace: str
    branch_note: str = ""
    merge: dict[str, Any] | None = None
    fence: FenceReport | None = None
    # Where the branch stands against its base now (ahead, behind, base, files), read
    # as the page is drawn; None: unknown (the page shows its turn's end, saying so).
    standing: dict[str, Any] | None = None
    busy: str = ""  # another unfinished task of the conversation: no follow-up now
    back: str = ""  # the page its forms return to ("conversation"); "" for the task's
    boxes: bool = False  # several boxes share the store: each task says which ran it

    @property
    def unfenced(self) -> bool:
        """Agents run with no sandbox (sandbox.mode = off): every page's header says so."""
        return self.fence is not None and self.fence.unfenced

    @property
    def name(self) -> str:
        return name_of(self.caller.who, self.caller.node.split(".")[0])

    def person(self, who: str, device: str = "") -> str:
        """`who` as this viewer reads it (see name_of)."""
        return name_of(who, device, self.caller)

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


def refusal(message: str, back: str, viewer: Viewer | None = None) -> str:
    """A refused form or link, said plainly, with the way back."""
    return outcome("Refused", message, back, viewer)


def outcome(
    title: str,
    message: str,
    back: str,
    viewer: Viewer | None,
    *,
    go_on: bool = False,
    good: bool = False,
    follow_up: dict[str, str] | None = None,
    decision: Entry | None = None,
) -> str:
    """What a form came to, said plainly (`good` news, or a refusal), with the way back
    (taken at once, `go_on`), under the same top bar as every page. `follow_up` (action,
    token, text) offers to send the agent the request the message suggests; `decision`
    shows who decided first."""
    return _ENV.get_template("outcome.html").render(
        viewer=viewer, title=title, message=local_times(message), back=back, go_on=go_on,
        good=good, follow_up=follow_up, decision=decision,
    )  # fmt: skip
