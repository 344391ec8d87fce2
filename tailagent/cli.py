# PYTHON_ARGCOMPLETE_OK  (argcomplete completes `tailagent` in bash, zsh and fish)
"""tailagent: a coding agent on your tailnet, spoken to over A2A.

Start with `tailagent serve --agent echo`, then `tailagent call hello` in
another terminal; `tailagent COMMAND --help` says more about each command."""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

from tailagent.config import (
    AGENTS,
    DEFAULT_URL,
    LOG_LEVELS,
    ROLES,
    ConfigError,
    Settings,
)

STATE_DIR_NODE_HELP = "without tailscaled: the state dir of this box's `serve --tsnet` server"


def _serve_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("serve", help="run the A2A server")
    p.add_argument("--agent", choices=AGENTS, help="which coding agent to serve (default: claude)")
    p.add_argument("--agent-command", metavar="CMD", help="any ACP agent, as a command line")
    p.add_argument("--cwd", metavar="DIR", help="the workspace (default: current directory)")
    p.add_argument(
        "--isolation",
        choices=("repository", "shared", "worktree"),
        help="repository: each conversation in a repository and branch of its own, "
        "borrowing the workspace's objects (the default, in a git repository; worktree is "
        "its old name); shared: all in the workspace",
    )
    p.add_argument(
        "--listen",
        metavar="ADDR",
        help="127.0.0.1:PORT, [::1]:PORT or unix:/path (default: 127.0.0.1:3008)",
    )
    p.add_argument("--public-url", metavar="URL", help="the URL the agent card advertises")
    p.add_argument(
        "--config", metavar="FILE", type=Path, help="a TOML config file (or $TAILAGENT_CONFIG)"
    )
    p.add_argument("--state-dir", metavar="DIR", help="where tasks and sessions are kept")
    _store_option(p)
    p.add_argument("--log-level", choices=LOG_LEVELS)
    p.add_argument("--log-format", choices=("text", "json"), help="json: one object a line")
    p.add_argument(
        "--tailnet",
        action="store_true",
        default=None,
        help="configure `tailscale serve` for this server, and remove it at stop",
    )
    p.add_argument("--tailnet-port", type=int, metavar="PORT", help="the HTTPS port (default 443)")
    p.add_argument(
        "--service",
        metavar="svc:NAME",
        help="serve under this Tailscale Service's name through tailscaled (implies --tailnet)",
    )
    p.add_argument(
        "--tsnet",
        action="store_true",
        default=None,
        help="join the tailnet as a node of its own (embedded tsnet; no tailscaled needed)",
    )
    p.add_argument("--hostname", metavar="NAME", help="--tsnet: the node's name (tailagent)")
    p.add_argument(
        "--tailscale-socket", metavar="PATH", help="tailscaled's LocalAPI socket (default: found)"
    )


def _agent_options(p: argparse.ArgumentParser) -> None:
    """Which agent, and as whom: shared by call, tasks, watch and cancel."""
    p.add_argument(
        "--url",
        help="the agent: http(s)://… or unix:/path (default: the server running on this "
        f"box's state dir, else {DEFAULT_URL})",
    )
    p.add_argument(
        "--token",
        metavar="TOKEN",
        default=os.environ.get("TAILAGENT_TOKEN"),
        help="a bearer token (default: $TAILAGENT_TOKEN; for this box's server, its local token)",
    )
    p.add_argument("--state-dir", metavar="DIR", help="where this box's server keeps its state")


EXIT_CODES = (
    "exit codes: 0 completed, 1 failed, canceled or rejected, 2 usage or connection "
    "error, 3 input-required (the reply command is printed), 130 interrupted, 141 the "
    "reader stopped reading (| head)"
)
# What the commands that follow no task exit with (not call's codes).
TASKS_EXIT_CODES = (
    "exit codes: 0 listed (none is a list too), 2 usage or connection error, 130 "
    "interrupted, 141 the reader stopped reading (| head)"
)
CHANGE_EXIT_CODES = (
    "exit codes: 0 done, or already done, or not confirmed at the prompt; 2 usage or "
    "connection error, a refusal, or no --yes without a terminal; 130 interrupted"
)


def _positive(text: str) -> int:
    """A count of at least one: `--limit 0` would ask the server for nothing."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive count (1 or more)")
    return value


def _call_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("call", help="send work to an A2A agent and watch it", epilog=EXIT_CODES)
    p.add_argument(
        "text",
        nargs="?",
        default="",
        help="the message (an answer, on a follow-up); - or a pipe: read it from stdin",
    )
    _agent_options(p)
    p.add_argument(
        "--context",
        metavar="ID",
        help="continue this conversation (its id or a unique start); a name that is none "
        "of yours starts a new one, and says so",
    )
    p.add_argument(
        "--existing",
        action="store_true",
        help="refuse a --context that names none of your conversations (else: a new one)",
    )
    p.add_argument(
        "--task",
        metavar="ID",
        help="answer or continue this task (its id, or a unique start); without it, a bare "
        "allow or deny answers your one waiting task",
    )
    p.add_argument(
        "--new", action="store_true", help="send the text as a new prompt, even allow or deny"
    )
    p.add_argument("--request", metavar="ID", help="the prompt this answer is for")
    p.add_argument(
        "--answer",
        metavar="QUESTION=LABEL",
        action="append",
        default=[],
        help="answer a question by its text (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object per event")
    p.add_argument(
        "-i", "--interactive", action="store_true", help="answer prompts in the terminal"
    )
    p.add_argument(
        "--require-signed",
        action="store_true",
        help="refuse an agent whose card is unsigned or whose key is not pinned",
    )
    p.add_argument(
        "--cancel-on-interrupt",
        action="store_true",
        help="Ctrl-C cancels the task at once (else a second Ctrl-C does)",
    )


def _tasks_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "tasks", help="your tasks on an agent, newest first", epilog=TASKS_EXIT_CODES
    )
    _agent_options(p)
    p.add_argument(
        "--state",
        choices=("submitted", "working", "input-required", "completed", "failed", "canceled",
                 "rejected", "auth-required"),
        metavar="STATE",
        help="only tasks in this state: submitted, working, input-required, completed, "
        "failed, canceled, rejected or auth-required",
    )  # fmt: skip
    p.add_argument("--limit", type=_positive, default=20, help="at most this many (default 20)")
    p.add_argument("--json", action="store_true", help="one JSON object per task")
    watch = sub.add_parser("watch", help="follow a task to its end", epilog=EXIT_CODES)
    watch.add_argument("task", metavar="TASK", help="the task's id, or a unique start of it")
    _agent_options(watch)
    cancel = sub.add_parser("cancel", help="cancel a task", epilog=EXIT_CODES)
    cancel.add_argument("task", metavar="TASK", help="the task's id, or a unique start of it")
    _agent_options(cancel)


# A conversation as diff, merge and discard take it.
CONTEXT_HELP = "the conversation: its id, or the start of it (8 characters: its branch's name)"


def _conversation_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    merge = sub.add_parser(
        "merge",
        help="bring a conversation's branch into its base branch",
        epilog=CHANGE_EXIT_CODES,
    )
    merge.add_argument("context", metavar="CONTEXT", help=CONTEXT_HELP)
    how = merge.add_mutually_exclusive_group()
    for strategy, text in (
        ("squash", "one commit listing the turns, trailers kept (the default)"),
        ("merge", "a merge commit"),
        ("rebase", "the turns' commits replayed on the base"),
    ):
        how.add_argument(
            f"--{strategy}", dest="strategy", action="store_const", const=strategy, help=text
        )
    merge.set_defaults(strategy="squash")
    merge.add_argument("--keep", action="store_true", help="keep the worktree and branch")
    merge.add_argument("--yes", action="store_true", help="do not ask first")
    _agent_options(merge)
    discard = sub.add_parser(
        "discard", help="drop a conversation's worktree and branch", epilog=CHANGE_EXIT_CODES
    )
    discard.add_argument("context", metavar="CONTEXT", help=CONTEXT_HELP)
    discard.add_argument("--yes", action="store_true", help="do not ask first")
    _agent_options(discard)
    diff = sub.add_parser("diff", help="a conversation's changes against its base")
    diff.add_argument("context", metavar="CONTEXT", help=CONTEXT_HELP)
    diff.add_argument("--json", action="store_true", help="one JSON object: the diff and its ids")
    _agent_options(diff)
    listed = sub.add_parser(
        "conversations", help="your conversations with a branch: ahead/behind, state"
    )
    listed.add_argument("--json", action="store_true", help="one JSON object per conversation")
    _agent_options(listed)


def _web_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("web", help="the approval desk: a sign-in link for a browser on this box")
    _agent_options(p)
    p.add_argument(
        "--open", action="store_true",
        help="open the link in this box's browser (through a private page: no command line "
        "shows the link)",
    )  # fmt: skip


def _state_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", type=Path, help="the server's TOML config file")
    p.add_argument("--state-dir", metavar="DIR", help="the server's state dir")


def _store_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store", metavar="URL", help="the database of tasks, sessions and the audit log "
        "(default: SQLite in the state dir; postgresql://... to share one among servers)",
    )  # fmt: skip


def _token_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("token", help="bearer tokens: add, list, revoke")
    actions = p.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="create a token and print it, once")
    add.add_argument("name", help="what the token is for (ci, alice-laptop): shown in logs")
    add.add_argument(
        "--role",
        dest="roles",
        action="append",
        choices=ROLES,
        help="a role of the token (repeatable; default: caller)",
    )
    _state_options(add)
    listed = actions.add_parser("list", help="the tokens, without their secrets")
    listed.add_argument("--json", action="store_true", help="one JSON object per token")
    _state_options(listed)
    revoke = actions.add_parser("revoke", help="revoke a token now")
    revoke.add_argument("name", help="the token's name, as `tailagent token list` shows it")
    _state_options(revoke)


def _card_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    keys = sub.add_parser("keys", help="the card's signing key: show (the default), init, rotate")
    keys.add_argument("--json", action="store_true", help="the key as one JSON object")
    actions = keys.add_subparsers(dest="action")
    show = actions.add_parser("show", help="the current key")
    # SUPPRESS: an action's own default would undo `keys --json show`.
    show.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="as JSON")
    _state_options(show)
    for action, text in (("init", "make the signing key"), ("rotate", "sign with a new key")):
        p = actions.add_parser(action, help=text)
        p.add_argument(
            "--alg",
            choices=("ES256", "EdDSA"),
            default=None if action == "rotate" else "ES256",
            help="the key type (default: ES256; rotate keeps it)",
        )
        p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="as JSON")
        _state_options(p)
    card = sub.add_parser("card", help="show an agent's card and check its signature")
    card.add_argument(
        "url",
        help="the agent's base URL (its card is at /.well-known/…); HOST:PORT alone is "
        "http:// on this box, https:// elsewhere",
    )
    card.add_argument("--json", action="store_true", help="the card and its signature as JSON")
    card.add_argument("--trust", action="store_true", help="pin the card's key for this URL")
    card.add_argument("--state-dir", metavar="DIR", help=STATE_DIR_NODE_HELP)
    peers = sub.add_parser("peers", help="every tailagent on the tailnet, with its card")
    peers.add_argument("--json", action="store_true", help="one JSON object per agent")
    peers.add_argument("--port", type=int, help="the port agents are served on (default: 443)")
    peers.add_argument("--scheme", choices=("https", "http"), default="https")
    peers.add_argument("--timeout", type=float, default=3.0, help="seconds per peer")
    peers.add_argument("--tailscale-socket", metavar="PATH", help="tailscaled's LocalAPI socket")
    peers.add_argument("--state-dir", metavar="DIR", help=STATE_DIR_NODE_HELP)


def _service_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("service", help="install or remove a systemd unit for this machine")
    actions = p.add_subparsers(dest="action", required=True)
    for action in ("install", "uninstall"):
        a = actions.add_parser(action)
        a.add_argument("--user", action="store_true", help="a `systemctl --user` unit")
        a.add_argument(
            "--dest", type=Path, metavar="PATH",
            help="the unit file (NAME.service), or a directory for tailagent.service",
        )  # fmt: skip
        if action == "install":
            a.add_argument(
                "--workspace", type=Path, default=Path.cwd(), help="the agent's workspace"
            )
            a.add_argument("--config", type=Path, help="the TOML config file the unit passes")
            a.add_argument(
                "--tsnet", action="store_true", help="the unit joins as its own tailnet node"
            )
            a.add_argument(
                "--auth-key-file",
                type=Path,
                metavar="FILE",
                help="--tsnet: the auth key, handed over as a systemd credential",
            )
            _unit_serve_options(a)


def _unit_serve_options(a: argparse.ArgumentParser) -> None:
    """The serve options `service install` writes into the unit's command line."""
    a.add_argument("--agent", choices=AGENTS, help="the agent it serves (default: claude)")
    a.add_argument("--agent-command", metavar="CMD", help="any ACP agent, as a command line")
    a.add_argument(
        "--isolation",
        choices=("repository", "shared", "worktree"),
        help="a repository per conversation (worktree: its old name), or one shared",
    )
    a.add_argument("--hostname", metavar="NAME", help="--tsnet: the node's name (tailagent)")
    a.add_argument("--public-url", metavar="URL", help="the URL the agent card advertises")
    a.add_argument("--tailnet", action="store_true", help="it configures `tailscale serve`")
    a.add_argument("--tailnet-port", type=int, metavar="PORT", help="the HTTPS port (443)")
    a.add_argument("--service", metavar="svc:NAME", help="it serves under this Tailscale Service")
    a.add_argument("--log-level", choices=LOG_LEVELS)
    a.add_argument("--log-format", choices=("text", "json"))


def _doctor_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("doctor", help="check that this box has what tailagent needs")
    p.add_argument("--json", action="store_true", help="the checks as one JSON list")
    p.add_argument(
        "--agent", choices=AGENTS, help="the agent to check (default: the running server's)"
    )
    p.add_argument("--agent-command", metavar="CMD", help="an ACP agent's command line to check")
    p.add_argument("--listen", metavar="ADDR", help="the listener to probe (as serve --listen)")
    p.add_argument("--tailscale-socket", metavar="PATH", help="tailscaled's LocalAPI socket")
    p.add_argument("--service", metavar="svc:NAME", help="check this box as the service's host")
    p.add_argument("--tsnet", action="store_true", default=None, help="check the embedded node")
    _state_options(p)
    _store_option(p)


def _clean_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "clean",
        help="remove what tailagent keeps that is no conversation's (no server running; "
        "--dry-run lists it any time)",
    )
    p.add_argument("--yes", action="store_true", help="do not ask first")
    p.add_argument("--dry-run", action="store_true", help="only list what would go")
    _state_options(p)


def _audit_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("audit", help="who approved or denied what, and when")
    p.add_argument("--since", metavar="WHEN", help="an ISO time, or an age such as 30m, 12h, 7d")
    p.add_argument("--json", action="store_true", help="one JSON object per decision")
    _state_options(p)
    _store_option(p)


def _usage_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("usage", help="what each person's work cost on this box, per UTC day")
    p.add_argument(
        "--since", metavar="WHEN", help="an ISO date, or an age such as 7d (default: today)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object per person and day")
    _state_options(p)
    _store_option(p)
    budget = sub.add_parser("budget", help="each person's daily budget: list, set, clear")
    actions = budget.add_subparsers(dest="action", required=True)
    for action, text in (("list", "the configured budget and each person's own"),
                         ("set", "give a person a daily budget of their own"),
                         ("clear", "give a person the configured budget again")):  # fmt: skip
        a = actions.add_parser(action, help=text)
        if action != "list":
            a.add_argument(
                "person", help="a login (alice@example.com), a tag (tag:ci) or token:NAME"
            )
        if action == "set":
            a.add_argument("usd", type=_dollars, help="US dollars a UTC day (0: none)")
        _state_options(a)
        _store_option(a)


def _dollars(text: str) -> float:
    from tailagent.config.checks import dollars

    try:
        return dollars(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _settings(flags: dict[str, object], config: Path | None) -> Settings | None:
    """The settings, or None after printing the one line that says what is wrong."""
    # Here, not at the top: the file's reader (tomllib) costs ~8 ms of CPU, and `call`,
    # `tasks`, `watch` read no settings.
    from tailagent.config.sources import load_settings
    from tailagent.process import secret_env

    if config is None and os.environ.get("TAILAGENT_CONFIG"):
        config = Path(os.environ["TAILAGENT_CONFIG"])
    try:
        # secret_env.environ(): os.environ and the secrets `serve` took out of it.
        return load_settings(flags, config, secret_env.environ())
    except ConfigError as exc:
        for problem in str(exc).splitlines():  # each problem of a file, not only the first
            print(f"tailagent: config error: {problem}", file=sys.stderr)
        return None


class VersionAction(argparse.Action):
    """`--version` prints more than argparse's own action would: how this tailagent
    is installed and what it carries, read only when asked."""

    def __init__(self, option_strings: list[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from tailagent import about  # only asked here: it brings platform, ~3 ms of CPU a run

        print(about.version_text())
        parser.exit()


def run() -> None:
    """The command's entry point: `main()`, quiet when whoever reads its output stops
    reading (`tailagent audit --json | head -1`): no traceback, the exit code a shell
    gives a command ended by SIGPIPE."""
    code: int | str | None
    try:
        code = main()
    except SystemExit as stop:
        code = stop.code
    except BrokenPipeError:
        code = _reader_gone()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = _reader_gone()
    raise SystemExit(code)


def _reader_gone() -> int:
    # Python would try to flush stdout again at exit, and print a traceback for it.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + 13


def unknown_arguments(unknown: list[str], parser: argparse.ArgumentParser) -> str:
    options = [o for action in parser._actions for o in action.option_strings]
    message = "unrecognized arguments: " + " ".join(unknown)
    for word in (w for w in unknown if w.startswith("-")):
        near = difflib.get_close_matches(word.split("=")[0], options, n=1)
        if near:
            return f"{message} (did you mean {near[0]}?)"
    return message


def unknown_command(words: list[str], commands: list[str]) -> str | None:
    """What to say of a first word that is no command, with the one probably meant
    (argparse lists all twenty)."""
    word = words[0] if words else ""
    if not word or word.startswith("-") or word in commands:
        return None
    near = difflib.get_close_matches(word, commands, n=1, cutoff=0.5)
    hint = f"; did you mean `tailagent {near[0]}`?" if near else ""
    return f"{word!r} is no tailagent command{hint} (`tailagent --help` lists them)"


def main(argv: list[str] | None = None) -> int:
    parser, sub = _parser()
    words = sys.argv[1:] if argv is None else argv
    if not words:  # a bare `tailagent`: what there is to do, not an error
        parser.print_help()
        return 0
    mistyped = unknown_command(words, list(sub.choices))
    if mistyped is not None:
        parser.error(mistyped)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # Said by the command's own parser (its usage, not the top level's), with the
        # option that was probably meant.
        command = sub.choices.get(args.command, parser)
        command.error(unknown_arguments(unknown, command))
    return _dispatch(args)


def _parser() -> tuple[
    argparse.ArgumentParser, argparse._SubParsersAction[argparse.ArgumentParser]
]:
    """Every command and its options, and shell completion for them."""
    parser = argparse.ArgumentParser(
        prog="tailagent", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--version",
        action=VersionAction,
        help="show this version, how it is installed, and the versions it carries",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _serve_parser(sub)
    _call_parser(sub)
    _tasks_parsers(sub)
    _conversation_parsers(sub)
    _web_parser(sub)
    _token_parser(sub)
    _audit_parser(sub)
    _usage_parsers(sub)
    _card_parsers(sub)
    _service_parser(sub)
    _doctor_parser(sub)
    _clean_parser(sub)
    completion = sub.add_parser("completion", help="shell completion: eval or source its output")
    completion.add_argument("shell", choices=("bash", "zsh", "fish"))
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions; else ~5 ms of CPU to import
        import argcomplete

        argcomplete.autocomplete(parser)
    return parser, sub


def _dispatch(args: argparse.Namespace) -> int:
    """Runs the command asked for: each command's module is imported only when it runs,
    so a quick command does not pay for the server's imports."""
    if args.command == "completion":
        import argcomplete

        print(argcomplete.shellcode(["tailagent"], shell=args.shell))
        return 0
    if args.command == "serve":
        return _serve(args)
    if args.command == "doctor":
        return _doctor(args)
    if args.command == "clean":
        from tailagent.client.clean import clean_command

        settings = _settings({"state_dir": args.state_dir}, args.config)
        return 2 if settings is None else clean_command(settings.state_dir, args.yes, args.dry_run)
    if args.command == "service":
        return _service(args)
    if args.command in ("card", "peers"):
        from tailagent.card.commands import card_command, peers_command

        return card_command(args) if args.command == "card" else peers_command(args)
    if args.command in ("token", "audit", "keys"):
        return _admin(args)
    if args.command in ("usage", "budget"):
        return _spending(args)
    if args.command in ("merge", "discard", "diff", "conversations"):
        from tailagent.client.conversation import conversation_command

        return conversation_command(args)
    if args.command == "web":
        from tailagent.client.web import web_command

        return web_command(args)
    if args.command in ("tasks", "watch", "cancel"):
        from tailagent.client.tasks import tasks_command

        return tasks_command(args)
    from tailagent.client.call import call_command

    return call_command(args)


def _doctor(args: argparse.Namespace) -> int:
    """`doctor`: the settings `serve` would run with, checked; an agent named by a flag
    is the one checked, over the one a running server runs."""
    from tailagent.admin.doctor import doctor_command

    flags = {
        "agent": args.agent,
        "agent_command": args.agent_command,
        "listen": args.listen,
        "state_dir": args.state_dir,
        "store": args.store,
        "tailscale.socket": args.tailscale_socket,
        "tailnet_service": args.service,
        "tsnet.enabled": args.tsnet,
    }
    settings = _settings(flags, args.config)
    asked = args.agent is not None or args.agent_command is not None
    return 2 if settings is None else doctor_command(settings, args.json, asked)


def _service(args: argparse.Namespace) -> int:
    """`service install|uninstall`: paths made absolute here, as the unit runs elsewhere."""
    from tailagent.service import SERVE_OPTIONS, install, uninstall

    if args.action == "install":
        config = args.config.resolve() if args.config else None
        key_file = args.auth_key_file.resolve() if args.auth_key_file else None
        options = {o: getattr(args, o[2:].replace("-", "_")) for o in SERVE_OPTIONS}
        return install(
            args.user, args.workspace, config, args.dest,
            tsnet=args.tsnet, auth_key_file=key_file, options=options,
        )  # fmt: skip
    return uninstall(args.user, args.dest)


def _admin(args: argparse.Namespace) -> int:
    """`token`, `audit` and `keys`: the state dir's and the store's own records. Each
    imports only its own command (`keys` pulls in the card's a2a-sdk modules: a
    `token add` would pay ~0.5 s of CPU for them)."""
    # A bare `tailagent keys` has no options of its own: defaults.
    flags = {
        "state_dir": getattr(args, "state_dir", None),
        "store": getattr(args, "store", None),
    }
    settings = _settings(flags, getattr(args, "config", None))
    if settings is None:
        return 2
    if args.command == "audit":
        from tailagent.admin.audit import audit_command

        return audit_command(args, settings.store_url)
    if args.command == "token":
        from tailagent.admin.tokens import token_command

        return token_command(args, settings.state_dir)
    from tailagent.card.commands import keys_command

    return keys_command(args, settings.state_dir)


def _spending(args: argparse.Namespace) -> int:
    """`usage` and `budget`: read from the store the settings name."""
    from tailagent.cost.commands import budget_command, usage_command

    flags = {"state_dir": args.state_dir, "store": args.store}
    settings = _settings(flags, getattr(args, "config", None))
    if settings is None:
        return 2
    return (usage_command if args.command == "usage" else budget_command)(args, settings)


def _serve(args: argparse.Namespace) -> int:
    # The server's secrets out of /proc/<pid>/environ, where its agents could read them:
    # may exec this process again, without them in its environment (process/secret_env.py).
    from tailagent.process import secret_env

    secret_env.hide()
    flags = {
        "agent": args.agent,
        "agent_command": args.agent_command,
        "cwd": args.cwd,
        "workspace.isolation": args.isolation,
        "listen": args.listen,
        "public_url": args.public_url,
        "state_dir": args.state_dir,
        "store": args.store,
        "log_level": args.log_level,
        "log_format": args.log_format,
        "tailnet": args.tailnet,
        "tailnet_port": args.tailnet_port,
        "tailnet_service": args.service,
        "tailscale.socket": args.tailscale_socket,
        "tsnet.enabled": args.tsnet,
        "tsnet.hostname": args.hostname,
    }
    settings = _settings(flags, args.config)
    if settings is None:
        return 2
    from tailagent.config.sources import unknown_environment
    from tailagent.output.logs import setup

    setup(settings.log_level, settings.log_format)
    for line in unknown_environment(os.environ):
        logging.getLogger("tailagent").warning("%s", line)
    if args.store and urlsplit(args.store).password:
        # Unlike the environment (process/secret_env.py), no exec takes it back out of argv.
        logging.getLogger("tailagent").warning(
            "the --store URL holds a password, which every user of this box can read in "
            "/proc/%d/cmdline: give the URL in TAILAGENT_STORE or the config file instead",
            os.getpid(),
        )
    # a2a-sdk wraps every call in an OpenTelemetry span, which costs even with no
    # exporter: off, and its wrappers left out (mends/tracing.py), unless set to true.
    os.environ.setdefault("OTEL_INSTRUMENTATION_A2A_SDK_ENABLED", "false")
    from tailagent.mends.tracing import untraced_unless_enabled

    untraced_unless_enabled()
    # On uvloop, libuv's event loop, a quick request costs ~10 % less than on
    # asyncio's own (docs/measured.md); nothing here depends on which loop runs.
    import uvloop

    from tailagent.server import StartError, run

    try:
        uvloop.run(run(settings))
    except StartError as exc:
        print(f"tailagent: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0
