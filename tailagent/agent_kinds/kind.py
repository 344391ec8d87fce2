"""What a description of one agent holds: plain data, read by every room that treats
agents differently (the ACP presets, login detection, the sandbox's home and allowlist,
the modes a caller may choose, the systemd unit), so adding an agent is one file and
no room keeps a list of its own that could drift from another's.

The variables an agent logs in with decide what is hidden from it, what is passed to
it and when its login file may be written: each is written here once.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class LoginPlace:
    """Where an agent keeps its login, so that tailagent can tell whether this box holds
    one without starting the agent (agents/acp/logins.py)."""

    keys: tuple[str, ...]  # variables that are a login by themselves
    files: tuple[str, ...]  # credential files, relative to the agent's home
    home_env: str | None  # the variable that moves the agent's home
    home: str  # its home, relative to the user's home (or under $XDG_DATA_HOME)
    # Files that may set a login up another way, each when it holds its marker (the
    # agent writes some of them itself, empty of any login).
    unknowable: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class AgentHome:
    """What one agent keeps in the home a fenced agent sees, relative to it
    (sandbox/home.py says why each kind of entry is treated as it is)."""

    writable: tuple[str, ...] = ()  # a private copy per conversation
    logins: tuple[str, ...] = ()  # the real file, read-write (inside a writable entry)
    # The person's file, read-only, inside a writable entry (the rest of the home is
    # read-only already).
    fixed: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()  # what sandbox.network = "allowlist" lets it reach
    # Variables that log the agent in without its login file: with one set, the login
    # file is only read, never written (no agent can swap in another account's login).
    # Some of its login's keys: those that replace the file rather than add to it.
    keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AgentKind:
    """One agent tailagent knows by name (`--agent`, the config file's `agent`)."""

    name: str
    title: str  # as lines name it; the part before " (" is how a sentence names it
    # The npm package `npx -y` runs and its arguments: an ACP preset. None: an agent of
    # tailagent's own backends (the Claude Agent SDK, echo).
    package: str | None = None
    args: tuple[str, ...] = ()
    # Variables the agent reads beside its login's keys (an API's address, the folder it
    # keeps its state in): with those keys, what it gets of the server's environment
    # (agents/acp/presets.py), on top of a small allowlist.
    env: tuple[str, ...] = ()
    login: LoginPlace | None = None  # None: tailagent cannot tell where it keeps one
    # How to give it a login, as a sentence ends "To log it in, <hint>."
    login_hint: str = ""
    # Opens a session without a login and fails only at the turn, slowly: its missing
    # login is refused before the session, from what its LoginPlace shows.
    silent_without_login: bool = False
    # The agent's modes a caller who is not admin may choose (agents/modes.py refuses
    # the others). A mode decides whether the agent asks before a dangerous step, so a
    # caller who could pick any mode could turn off every prompt tailagent relies on. A
    # list of modes known to go on asking is the rule (not a list of modes known to
    # stop): a mode an agent adds later, or one an agent tailagent does not know
    # advertises at run time, is refused until someone has looked at it, and an agent
    # whose modes nobody has looked at lists none. Admins may choose any mode.
    #
    # Edits in the workspace count as asking enough: the design lets an agent write
    # files without a prompt (a turn's changes are shown, kept in its own worktree and
    # can be undone), and tailagent's own git never runs what a file says. So a mode that
    # writes files without asking and still asks before any other command is listed.
    caller_modes: tuple[str, ...] = ()
    # What the agent writes in the home: a fenced agent's private copies, and what the
    # systemd unit lets the service write beside the workspace (ReadWritePaths=).
    home: AgentHome = field(default_factory=AgentHome)

    def __post_init__(self) -> None:
        """A key that keeps the login file read-only must be one of the login's keys:
        two lists that drifted apart would leave a login writable, or hidden, unawares."""
        login_keys = self.login.keys if self.login is not None else ()
        stray = [key for key in self.home.keys if key not in login_keys]
        if stray:
            raise ValueError(f"{self.name}: {', '.join(stray)} in its home's keys, not its login's")

    @property
    def credential_env(self) -> tuple[str, ...]:
        """The variables of the server's environment the agent is given for its login
        and its own settings: its login's keys, then the others it reads."""
        keys = self.login.keys if self.login is not None else ()
        return (*keys, *(name for name in self.env if name not in keys))
