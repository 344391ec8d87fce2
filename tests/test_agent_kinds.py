"""The agents' descriptions (tailagent/agent_kinds/): each agent is one module, listed on
the face, and the lists a description holds agree with one another."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tailagent.agent_kinds import KINDS
from tailagent.agent_kinds.kind import AgentHome, AgentKind, LoginPlace

FOLDER = Path(__file__).resolve().parent.parent / "tailagent" / "agent_kinds"


def test_every_agents_module_is_listed_on_the_face() -> None:
    """A new agent's module that the face does not list would be an agent nobody runs."""
    described = [
        value
        for path in sorted(FOLDER.glob("*.py"))
        if path.stem not in ("__init__", "kind")
        for value in vars(importlib.import_module(f"tailagent.agent_kinds.{path.stem}")).values()
        if isinstance(value, AgentKind)
    ]
    assert described
    assert [kind for kind in described if KINDS.get(kind.name) is not kind] == []


def test_each_login_kept_in_the_home_is_inside_an_entry_it_writes() -> None:
    """A login bound over the real file lives in the agent's private copy of its entry."""
    for kind in KINDS.values():
        for login in kind.home.logins:
            assert any(login.startswith(entry + "/") for entry in kind.home.writable), kind.name


def test_a_preset_says_how_to_log_it_in() -> None:
    for kind in KINDS.values():
        if kind.package is not None:
            assert kind.login_hint and kind.login is not None, kind.name


def test_a_key_that_keeps_the_login_read_only_must_be_a_login_key() -> None:
    login = LoginPlace(keys=("A_KEY",), files=("auth.json",), home_env=None, home=".agent")
    with pytest.raises(ValueError, match="B_KEY"):
        AgentKind("agent", "An agent", login=login, home=AgentHome(keys=("A_KEY", "B_KEY")))


def test_the_credential_variables_are_the_login_keys_then_the_rest() -> None:
    login = LoginPlace(keys=("A_KEY",), files=(), home_env=None, home=".agent")
    kind = AgentKind("agent", "An agent", env=("BASE_URL", "A_KEY"), login=login)
    assert kind.credential_env == ("A_KEY", "BASE_URL")
