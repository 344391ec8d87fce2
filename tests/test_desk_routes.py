"""The desk's route table on its own: every URL and method where the pages expect it,
on the blueprint whose rules apply to it.

The routes are registered by one module per concern (web/desk_app.py lists them); this
pins the whole table, so a route dropped or moved between the browser's blueprint
(CSP, refusal pages) and Web Push's JSON one shows here, not in a browser.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from quart import Quart

from tailagent.web.desk_app import desk_app

DESK = {  # the pages, their streams and forms: the browser's rules
    ("/desk/", "GET"),
    ("/desk/events", "GET"),
    ("/desk/tasks/<task_id>", "GET"),
    ("/desk/tasks/<task_id>/events", "GET"),
    ("/desk/tasks", "POST"),
    ("/desk/tasks/<task_id>/follow", "POST"),
    ("/desk/tasks/<task_id>/answer", "POST"),
    ("/desk/tasks/<task_id>/cancel", "POST"),
    ("/desk/tasks/<task_id>/merge", "POST"),
    ("/desk/tasks/<task_id>/diff", "GET"),
    ("/desk/tasks/<task_id>/conversation", "GET"),
    ("/desk/signin-link", "POST"),
    ("/desk/signin", "GET"),
    ("/desk/static/<path:filename>", "GET"),
}
PUSH = {  # Web Push: JSON bodies, refusals in JSON
    ("/desk/manifest.webmanifest", "GET"),
    ("/desk/sw.js", "GET"),
    ("/desk/push/key", "GET"),
    ("/desk/push/subscriptions", "POST"),
    ("/desk/push/subscriptions/remove", "POST"),
    ("/desk/notifications", "GET"),
    ("/desk/notifications/<subscription_id>/remove", "POST"),
    ("/desk/push/answer", "POST"),
}


def app() -> Quart:
    """The desk's app as the first request builds it; no route runs, so no part is real."""
    webpush = SimpleNamespace(box="box", subscriptions=None)
    parts = SimpleNamespace(webpush=webpush, store=None, desk=None, conversations=None, secret=b"")
    return desk_app(cast("Any", parts))


def routes_of(blueprint: str) -> set[tuple[str, str]]:
    return {
        (rule.rule, method)
        for rule in app().url_map.iter_rules()
        if rule.endpoint.startswith(f"{blueprint}.")
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}
    }


def test_every_page_stream_and_form_is_on_the_browsers_blueprint() -> None:
    assert routes_of("desk") == DESK


def test_web_push_keeps_its_own_blueprint() -> None:
    assert routes_of("desk_push") == PUSH


def test_the_desks_static_files_are_where_its_blueprint_serves_them() -> None:
    static = app().blueprints["desk"].static_folder
    assert static is not None and (Path(static) / "desk.js").is_file()
