"""`tailagent usage` and `tailagent budget`: what each person's work cost on this box,
and the daily budget each may spend.

A person's work that came through another box is a row of its own ("alice@example.com
via devbox-1"); what their work here handed to other boxes cost there is in its own
column ("delegated"), never in their own cost: adding up `usage` over the boxes counts
each dollar once.

Both read and write the store itself, as `tailagent audit` and `tailagent token` do:
no server needs to run, and whoever can open the state dir (or the shared database)
is the box's owner. A budget set here holds at the next task a server admits, on
every server that shares the store.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TypeVar

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tailagent.access.tokens import TokenStore
from tailagent.config import Settings
from tailagent.cost.budgets import resets_at
from tailagent.cost.figures import dollars
from tailagent.cost.ledger import DayUsage, Usage, owner_named, person_of
from tailagent.cost.since import parse_since
from tailagent.output.visible import json_line, visible
from tailagent.store.database import StoreUnavailable, open_database, redacted, sqlite_path
from tailagent.tailnet.localapi import LocalAPI, LocalAPIUnavailable, NotOperator, self_login

T = TypeVar("T")


async def _with_usage(store_url: str, step: Callable[[Usage], Awaitable[T]]) -> T:
    database = open_database(store_url)
    try:
        usage = Usage(database)
        await usage.initialize()
        return await step(usage)
    except database.errors as exc:
        raise StoreUnavailable(str(exc)) from None
    finally:
        await database.aclose()


def _since(text: str | None) -> date | None:
    """The first UTC day shown: `--since` as an age (7d) or an ISO date; today without."""
    if not text:
        return datetime.now(UTC).date()
    try:
        return parse_since(text).astimezone(UTC).date()
    except ValueError:
        return None


def usage_command(args: argparse.Namespace, settings: Settings) -> int:
    since = _since(args.since)
    if since is None:
        print(f"tailagent: --since wants an ISO date or an age like 7d, not {args.since!r}")
        return 2
    url = settings.store_url
    path = sqlite_path(url)
    try:
        if path is not None and not path.exists():
            days: list[DayUsage] = []  # no server has made the store yet: nothing spent
            own: dict[str, float] = {}
        else:
            days, own = asyncio.run(_with_usage(url, lambda u: _read(u, since)))
    except (OSError, StoreUnavailable) as exc:
        print(f"tailagent: cannot read usage from {redacted(url)}: {exc}", file=sys.stderr)
        return 1
    default = settings.budgets.per_caller_daily_usd
    if args.json:
        for day in days:
            budget = own.get(day.owner, default)
            print(json_line(_json_of(day, budget)))
        return 0
    _print_table(days, own, default)
    return 0


async def _read(usage: Usage, since: date) -> tuple[list[DayUsage], dict[str, float]]:
    return await usage.days(since), await usage.budgets()


def _json_of(day: DayUsage, budget: float | None) -> dict[str, object]:
    return {
        "day": day.day,
        "person": person_of(day.owner),
        "owner": day.owner,
        "via": day.via,
        "usd": round(day.cost.usd, 6),
        "delegatedUsd": round(day.delegated, 6),
        "inputTokens": day.cost.input_tokens,
        "outputTokens": day.cost.output_tokens,
        "turns": day.turns,
        "conversations": day.conversations,
        "budgetUsd": budget,
    }


def _print_table(days: list[DayUsage], own: dict[str, float], default: float | None) -> None:
    """One row per person and UTC day; the person's words escaped, never markup."""
    if not days:
        print("no cost recorded on this box for those days", file=sys.stderr)
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    for name, right in (("day (UTC)", False), ("person", False), ("cost", True),
                        ("delegated", True), ("budget", True), ("turns", True),
                        ("tokens in/out", True)):  # fmt: skip
        table.add_column(name, justify="right" if right else "left", no_wrap=name != "person",
                         overflow="fold")  # fmt: skip
    for day in days:
        budget = own.get(day.owner, default)
        shown = "—" if budget is None else dollars(budget)
        tokens = f"{day.cost.input_tokens:,}/{day.cost.output_tokens:,}"
        via = f" via {day.via}" if day.via else ""
        cells = (
            day.day,
            person_of(day.owner) + via,
            dollars(day.cost.usd),
            dollars(day.delegated) if day.delegated else "—",
            shown,
            str(day.turns),
            tokens,
        )
        table.add_row(*(Text(visible(cell, one_line=True)) for cell in cells))
    Console(highlight=False).print(table)


def budget_command(args: argparse.Namespace, settings: Settings) -> int:
    url = settings.store_url
    default = settings.budgets.per_caller_daily_usd
    configured = "no limit" if default is None else f"{dollars(default)} a day"
    try:
        if args.action == "list":
            own = asyncio.run(_with_usage(url, lambda u: u.budgets()))
            print(f"budgets.per_caller_daily_usd: {configured}")
            for owner, usd in own.items():
                print(
                    visible(f"{person_of(owner)}: {dollars(usd)} a day (their own)", one_line=True)
                )
            return 0
        amount = None if args.action == "clear" else args.usd
        owner = person_meant(args.person, settings.state_dir, amount is not None)
        asyncio.run(_with_usage(url, lambda u: u.set_budget(owner, amount)))
    except NoOne as exc:
        print(visible(f"tailagent: {exc}", one_line=True), file=sys.stderr)
        return 2
    except (OSError, StoreUnavailable) as exc:
        print(f"tailagent: cannot reach the store {redacted(url)}: {exc}", file=sys.stderr)
        return 1
    who = person_of(owner)
    if amount is not None and (why := asyncio.run(admin_because(owner, settings))):
        print(visible(f"{who}: {dollars(amount)} a day is kept, but {who} is an admin here "
                      f"({why}) and admins are held to no budget: it holds from their next "
                      "task once they are not", one_line=True))  # fmt: skip
        return 0
    if amount is None:
        print(visible(f"{who}: back to budgets.per_caller_daily_usd ({configured})", one_line=True))
    else:
        print(visible(f"{who}: {dollars(amount)} a day, from their next task (days reset at "
                      f"midnight UTC; the next at {resets_at()})", one_line=True))  # fmt: skip
    return 0


class NoOne(Exception):
    """A name a budget would hold no one by; str() says why and what to write."""


def person_meant(name: str, state_dir: Path, setting: bool) -> str:
    """The owner `budget set NAME` and `budget clear NAME` mean. A bare name no login can
    be (tailnet logins have an @) that is a token's name here means that token's person,
    `token:NAME`, the name its calls are counted under: kept for `user:NAME` it would
    hold no one, without a word. Said on stderr, so the person learns the name `usage`
    shows. A bare name that is no token's either is refused for a set (it would hold no
    one); a clear takes it as given (a budget kept so before is cleared so)."""
    owner = owner_named(name)
    if owner != "user:" + name or "@" in name:
        return owner
    if any(token.name == name for token in TokenStore(state_dir).list()):
        print(visible(f"tailagent: {name} is a token's name here, and a token's person is "
                      f"token:{name} (a login has an @): the budget is token:{name}'s",
                      one_line=True), file=sys.stderr)  # fmt: skip
        return "token:" + name
    if setting:
        raise NoOne(f"{name} is no login (a login has an @) and no token here is named "
                         f"so: a budget for it would hold no one (a token's person is "
                         f"token:NAME, a tagged node's tag:NAME)")  # fmt: skip
    return owner


async def admin_because(owner: str, settings: Settings) -> str | None:
    """Why the policy makes this person an admin (held to no budget), as far as this
    command can tell without a request: the settings, the tokens, and tailscaled's word
    on who owns the node. A tailnet grant is known only when the person calls."""
    access = settings.access
    if owner.startswith("token:"):
        name = owner.removeprefix("token:")
        tokens = TokenStore(settings.state_dir).list() if settings.state_dir.exists() else []
        if any(t.name == name and "admin" in t.roles for t in tokens):
            return "its token's roles"
        return None
    if owner.startswith("tags:"):
        tags = set(owner.removeprefix("tags:").split(","))
        if "admin" in access.tag_roles and tags & set(access.allowed_tags):
            return "access.allowed_tags with access.tag_roles"
        return None
    login = owner.removeprefix("user:")
    if "admin" in access.login_roles and login in access.allowed_logins:
        return "access.allowed_logins with access.login_roles"
    if settings.tsnet.enabled:
        return None  # the embedded node's owner is known to the running server only
    api = LocalAPI.tailscaled(settings.tailscale.socket, timeout=2.0)
    try:
        return "the owner of this node" if self_login(await api.status()) == login else None
    except (LocalAPIUnavailable, NotOperator, ValueError):
        return None
    finally:
        await api.aclose()
