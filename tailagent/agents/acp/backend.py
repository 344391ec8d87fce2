"""The ACP backend: one agent process per conversation, with warm spares.

Starting an agent through npx and completing the ACP handshake takes seconds; a
spare process, spawned and initialized ahead, takes the next new conversation so
it does not wait. A conversation whose process is gone comes back through
`session/resume` (no replay of its history) or else `session/load`, when the agent
offers one of them.
"""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import acp
from acp import RequestError
from acp.schema import EnvVariable, HttpMcpServer, McpServerStdio

from tailagent.agent_kinds.kind import AgentKind as Preset
from tailagent.agents.acp.install import installed, program
from tailagent.agents.acp.logins import SILENT_WITHOUT_LOGIN, login_of, missing_login
from tailagent.agents.acp.presets import agent_environment, command_line, shown_command
from tailagent.agents.acp.process import AgentProcess
from tailagent.agents.acp.session import (
    AUTH_REQUIRED,
    AcpSession,
    AgentNeedsLogin,
    HostClient,
    ToolChannel,
    ToolChannels,
)
from tailagent.agents.acp.terminals import Terminals
from tailagent.agents.events import Notice, Skill
from tailagent.agents.spares import Spares
from tailagent.config import AgentSettings
from tailagent.config.mcp_servers import McpServer
from tailagent.sandbox.fences import TOOLS_INSIDE, Sandbox

log = logging.getLogger("tailagent.agents")
OWN_TOOLS = "tailagent"  # the MCP server of tailagent's own tools, as the agent names it
# Login methods that take an API key from the agent's environment (codex-acp 2.x).
API_KEY_METHODS = frozenset({"api-key", "apikey", "openai-api-key"})


def _acp_server(server: McpServer) -> McpServerStdio | HttpMcpServer:
    if server.url is not None:
        return HttpMcpServer(type="http", name=server.name, url=server.url, headers=[])
    env = [EnvVariable(name=k, value=v) for k, v in server.env.items()]
    return McpServerStdio(
        name=server.name, command=server.command or "", args=list(server.args), env=env
    )


def _described(
    preset: Preset, custom_command: str | None, workspace: Path
) -> tuple[str, tuple[Skill, ...]]:
    """The card's words for the agent: a command of the operator's is named by its
    program (the words before its options, whose values may be secrets)."""
    named = preset.title
    if preset.package is None and custom_command is not None:
        named = f"An ACP agent (`{shown_command(custom_command, options=False)}`)"
    skill = Skill(
        id="coding",
        name="Coding",
        description=(
            f"{named} reads, edits and runs code in the workspace. Every dangerous step "
            "comes back as an input-required question. Message metadata `mode` picks one "
            "of the agent's modes for the turn."
        ),
        tags=("coding", preset.name),
        examples=("Fix the failing test in calc.py", "Explain what this repository does"),
    )
    return f"{named}, working in {workspace.name}.", (skill,)


class AcpBackend:
    def __init__(
        self,
        preset: Preset,
        workspace: Path,
        settings: AgentSettings,
        custom_command: str | None = None,
        mcp_servers: tuple[McpServer, ...] = (),
        sandbox: Sandbox | None = None,
        spare_directory: Callable[[], Awaitable[Path]] | None = None,
        tool_channels: ToolChannels | None = None,
    ) -> None:
        self.sandbox = sandbox
        # tailagent's own tools (list_peers, delegate), offered to every session when set.
        self.tool_channels = tool_channels
        self.mcp_servers: list[Any] = [_acp_server(s) for s in mcp_servers]
        self.preset = preset
        self.name = preset.name
        self.workspace = workspace
        self.settings = settings
        self.argv = command_line(preset, settings.package_version, custom_command)
        self.env = agent_environment(dict(os.environ), preset, settings.env_passthrough)
        self.max_sessions: int | None = settings.max_processes
        self.caller_modes = preset.caller_modes
        self.description, self.skills = _described(preset, custom_command, workspace)
        # Unfenced, a spare process starts in the workspace and serves whichever
        # conversation takes it (its editor side is fenced to that conversation's
        # directory only then). Fenced, a process lives in one conversation's sandbox from
        # its first instruction, so a spare starts in the directory the next conversation
        # will work in (a worktree made ahead) and serves only that one.
        fenced = sandbox is not None and sandbox.on
        self._spares = Spares(
            settings.warm_spares,
            self._spare,
            lambda p: p.stop(grace=2.0),
            "agent process",
            where=spare_directory if fenced else None,
        )
        self._spare_directory = spare_directory if fenced else None
        # Fenced, a preset's package is installed by tailagent, not fetched by npx.
        self._package = preset.package if fenced and custom_command is None else None

    def _fenced(self) -> bool:
        return self.sandbox is not None and self.sandbox.on

    def _process(self, directory: Path) -> AgentProcess:
        # A fenced process reaches its conversation's tool socket only through the
        # folder bound into its fence when it starts (it serves that directory only).
        channels = self.tool_channels if self._fenced() else None
        tools = channels.folder(directory) if channels is not None else None
        fence = self.sandbox.fence(directory, tools=tools) if self.sandbox is not None else None
        return AgentProcess(
            self.argv,
            self.env,
            directory,
            lambda p: HostClient(p, directory, self.settings.max_file_bytes),
            fence,
        )

    async def _spawn(self, directory: Path | None = None) -> AgentProcess:
        process = self._process(directory or self.workspace)
        await process.start(self.settings.start_timeout)
        return process

    async def _spare(self, directory: Path | None = None) -> AgentProcess:
        """A process started ahead: frozen once its handshake is done, until a
        conversation takes it (`_open` thaws it)."""
        process = await self._spawn(directory)
        try:
            await process.freeze()
        except BaseException:
            # Cancelled in the freeze (a server stopping): no one holds this process
            # yet, which would run on, its connection's tasks dropped pending.
            await process.stop(grace=1.0)
            raise
        return process

    async def start(self) -> None:
        """Starts the first process now: a missing npx or a broken command stops the
        server at start-up, with one line, not the first caller's task. A missing login
        is said now too, as for every agent (acp/logins.py)."""
        title = self.preset.title.split(" (")[0]
        missing = missing_login(self.name, title, self.preset.login_hint, self.env)
        if missing is not None:
            log.warning("%s", missing)
        if self._package is not None:
            assert self.sandbox is not None
            sandbox = self.sandbox
            folder = await installed(
                self._package,
                self.settings.package_version,
                lambda where: sandbox.fence(where, network="on", home=False),
            )
            sandbox.show(folder)  # read-only, wherever the home is
            self.argv = [str(program(folder, self._package)), *self.preset.args]
        npx = Path(self.argv[0]).name == "npx"  # a preset unfenced, not a command of yours
        log.info(
            "starting the agent: %s (%sagent.start_timeout allows %.0f s)",
            shlex.join(self.argv), "a first start through npx downloads it; " if npx else "",
            self.settings.start_timeout,
        )  # fmt: skip
        if self._spare_directory is not None:
            # Fenced: the first process starts where the next conversation will work.
            directory = await self._spare_directory()
            first = await self._spare(directory)
            self._spares.add(first, directory)
            return
        first = await self._spare()
        if self.settings.warm_spares:
            self._spares.add(first)
        else:
            await first.stop(grace=1.0)

    async def open_session(
        self, resume_id: str | None = None, cwd: Path | None = None
    ) -> AcpSession:
        if self.name in SILENT_WITHOUT_LOGIN:
            # It would open the session and fail the turn minutes later ("Cannot connect
            # to API"): a login it does not have is refused now, with its hint.
            home = Path(self.env.get("HOME") or Path.home())
            if login_of(self.name, self.env, home).found is False:
                raise self._needs_login()
        by_directory = self._spare_directory is not None
        process = await self._spares.take(cwd if by_directory else None)
        try:
            return await self._open(process, resume_id, cwd or self.workspace)
        except BaseException:
            await process.stop(grace=1.0)
            raise

    async def _open(self, process: AgentProcess, resume_id: str | None, root: Path) -> AcpSession:
        """Opens the session in `root`. A process started ahead serves whichever
        conversation takes it, so its editor side (file reads and writes) is fenced
        to that conversation's directory only now."""
        connection = process.connection
        assert connection is not None
        process.thaw()  # a spare waits frozen
        process.host.workspace = root
        cwd = str(root)
        notice: Notice | None = None
        tools = await self._tool_channel(root)
        servers = self._servers(tools)
        try:
            if resume_id:
                how, notice, options = await self._reattach(process, resume_id, cwd, servers)
                if how is not None:
                    log.info("session %s taken up again with %s", resume_id, how)
                    session = self._session(process, resume_id, root, tools)
                    session.reattached_with = how
                    session.config_options = options
                    return session
            created = await self._new_session(process, cwd, servers)
        except BaseException as exc:
            if tools is not None:
                await tools.close()
            if isinstance(exc, RequestError) and exc.code == AUTH_REQUIRED:
                raise self._needs_login() from None
            raise
        session = self._session(process, created.session_id, root, tools)
        session.config_options = list(created.config_options or [])
        if notice is not None:
            session.note(notice)
        return session

    async def _tool_channel(self, root: Path) -> ToolChannel | None:
        if self.tool_channels is None:
            return None
        return await self.tool_channels.open(root, TOOLS_INSIDE if self._fenced() else None)

    def _servers(self, tools: ToolChannel | None) -> list[Any]:
        """The session's MCP servers: the configured ones, and tailagent's own."""
        if tools is None:
            return self.mcp_servers
        command, *args = tools.command
        own = McpServerStdio(name=OWN_TOOLS, command=command, args=args, env=[])
        return [*self.mcp_servers, own]

    def _needs_login(self) -> AgentNeedsLogin:
        return AgentNeedsLogin(f"The agent needs a login on the server: {self.preset.login_hint}.")

    async def _new_session(self, process: AgentProcess, cwd: str, servers: list[Any]) -> Any:
        """A new session. Most agents list their login methods whether or not they are
        logged in (Gemini with its key set, OpenCode), so only the session's own refusal
        says a login is missing; one the agent can complete from a key it was given
        (codex-acp's `api-key`, an `env_var` method whose variables are set) is sent
        once, then the session asked for again."""
        connection = process.connection
        assert connection is not None
        try:
            return await connection.new_session(cwd=cwd, mcp_servers=servers)
        except RequestError as exc:
            method = self._key_login(process.auth_methods) if exc.code == AUTH_REQUIRED else None
            if method is None:
                raise
        log.info("agent %s: logging in with %s (its key is in the agent's environment)",
                 process.pid, method)  # fmt: skip
        await connection.authenticate(method_id=method)
        return await connection.new_session(cwd=cwd, mcp_servers=servers)

    def _key_login(self, methods: list[Any]) -> str | None:
        """The id of a login method the agent completes by itself from a key in its
        environment, if it offers one and the key is there."""
        for method in methods:
            needed = getattr(method, "vars", None)
            if needed is not None:  # an env_var method: it names what it reads
                if all(v.name in self.env for v in needed if not v.optional):
                    return str(method.id)
            elif method.id.replace("_", "-").lower() in API_KEY_METHODS and any(
                name in self.env
                for name in (*self.preset.credential_env, *self.settings.env_passthrough)
            ):
                return str(method.id)
        return None

    async def _reattach(
        self, process: AgentProcess, resume_id: str, cwd: str, servers: list[Any]
    ) -> tuple[str | None, Notice | None, list[Any]]:
        """Takes up an earlier session: session/resume where the agent offers it (it
        reattaches without replaying the history to us), else session/load. Returns the
        method that worked and the session's config options, or None and the notice
        that says continuity was lost."""
        connection = process.connection
        assert connection is not None
        # Each is bounded by agent.start_timeout: one the agent never answers is given up
        # with $/cancel_request, rather than holding the conversation (and the pool) forever.
        within = self.settings.start_timeout
        error: Exception | None = None
        ways = (
            ("session/resume", process.supports_resume, connection.resume_session),
            ("session/load", process.supports_load, connection.load_session),
        )
        for how, offered, take_up in ways:
            if not offered:
                continue
            try:
                taken = await process.bounded(
                    take_up(cwd=cwd, session_id=resume_id, mcp_servers=servers),
                    acp.AGENT_METHODS[how.replace("/", "_")], resume_id, within,
                )  # fmt: skip
                return how, None, list(taken.config_options or [])
            except (RequestError, TimeoutError) as exc:
                if isinstance(exc, RequestError) and exc.code == AUTH_REQUIRED:
                    raise
                log.info("%s of %s failed (%s)", how, resume_id, exc)
                error = exc
        if error is not None:
            return (
                None,
                Notice(
                    f"The agent could not reload the earlier session ({error}): this turn "
                    "starts fresh, and the conversation's earlier turns are not known to it."
                ),
                [],
            )
        return (
            None,
            Notice(
                "The agent cannot load earlier sessions: this turn starts fresh, and the "
                "conversation's earlier turns are not known to it."
            ),
            [],
        )

    def _session(
        self, process: AgentProcess, session_id: str, root: Path, tools: ToolChannel | None
    ) -> AcpSession:
        return AcpSession(
            process,
            session_id,
            root,
            login_hint=self.preset.login_hint,
            cancel_timeout=self.settings.cancel_timeout,
            terminals=Terminals(
                root,
                self.settings.terminal_output_limit,
                self.settings.max_terminals_per_turn,
                process.fence,
            ),
            tools=tools,
        )

    async def aclose(self) -> None:
        await self._spares.aclose()
