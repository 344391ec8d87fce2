"""Each conversation's one way out of its fence: a proxy of its own, bridged in.

A fence has a network namespace of its own whatever `sandbox.network` says; with "on" or
"allowlist" its way out is a proxy (proxy.py) that tailagent runs outside it. One proxy
for every fence was shared state: an agent that could write the socket's folder replaced
the socket and read another conversation's requests, and one that held every connection
left the others none. So each conversation has a proxy of its own, capped at
PROXY_CONNECTIONS, its socket in a folder of the conversation's private things bound
read-only at PROXY_INSIDE; inside, netbridge.py turns the fence's own 127.0.0.1:PROXY_PORT
into that socket, and the environment points HTTP clients, SOCKS clients and git's ssh
(sshproxy.py) at it.
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

from tailagent.config import SandboxSettings
from tailagent.sandbox.allowlist import Allowlist
from tailagent.sandbox.proxy import AllowlistProxy, bridge_argv, proxy_env

PROXY_INSIDE = Path("/run/tailagent-proxy")
PROXY_PORT = 3128
# Connections one conversation may hold open through its proxy at once.
PROXY_CONNECTIONS = 64
SSHPROXY = Path(__file__).resolve().with_name("sshproxy.py")  # beside netbridge.py


class Exits:
    """The proxies of every conversation, by the folder of each one's socket."""

    def __init__(self, settings: SandboxSettings, agent_hosts: tuple[str, ...], python: str):
        hosts = (*agent_hosts, *settings.allow_hosts)
        self._allow = {
            "on": Allowlist.parse(settings.allow_hosts, public=True),
            "allowlist": Allowlist.parse(hosts),
        }
        self._proxies: dict[Path, AllowlistProxy] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._refused_before = 0  # by the proxies of conversations gone since the start
        self.bridge = bridge_argv(python, str(PROXY_INSIDE / "proxy.sock"), PROXY_PORT)
        # ssh takes no proxy from the environment: git's runs with SOCKS5 to the fence's.
        through = shlex.join([python, "-I", "-S", str(SSHPROXY), str(PROXY_PORT)])
        self._ssh_command = f"ssh -o {shlex.quote(f'ProxyCommand={through} %h %p')}"
        self.hosts = hosts

    def describe(self, network: str) -> str:
        """What a fence of `network` reaches, for the start's line and doctor."""
        if network == "allowlist":
            return f"only {', '.join(self.hosts)}, through its own proxy"
        if network == "on":
            named = ", but what sandbox.allow_hosts names" if self._allow["on"].networks else ""
            return (
                "the internet through its own proxy, never loopback, the tailnet, private "
                f"addresses or this box{named}"
            )
        return "no network"

    def proxied(self, network: str) -> bool:
        """Whether a fence of `network` goes out through a proxy ("none" does not)."""
        return network in self._allow

    def folder(self, private: Path, network: str, label: str) -> Path:
        """The folder of the socket of this conversation's own proxy for `network`,
        listening from now on: no agent shares a proxy, its connections or its socket's
        folder with another conversation's, and none can replace its socket (the folder
        is bound read-only, and it lies in the hidden state dir)."""
        folder = private / f"net-{network}"
        if folder not in self._proxies:
            folder.mkdir(mode=0o700, exist_ok=True)
            proxy = AllowlistProxy(folder / "proxy.sock", self._allow[network],
                                   label=label, max_tunnels=PROXY_CONNECTIONS)  # fmt: skip
            proxy.start_soon()
            self._proxies[folder] = proxy
        return folder

    def environment(self) -> dict[str, str]:
        """What points a fenced agent's clients at its proxy."""
        environment = proxy_env(PROXY_PORT)
        environment["GIT_SSH_COMMAND"] = self._ssh_command
        # Its own loopback (a test server the agent starts) is reached directly.
        environment["NO_PROXY"] = environment["no_proxy"] = "localhost,127.0.0.1,::1"
        return environment

    def refusals(self) -> int:
        """Connections the proxies refused to fenced agents since the start (/metrics)."""
        counted = sum(sum(p.refused.values()) for p in self._proxies.values())
        return self._refused_before + counted

    def stop(self, private: Path) -> None:
        """Closes the proxies of a conversation that is gone, keeping their count."""
        for folder in [f for f in self._proxies if f.parent == private]:
            proxy = self._proxies.pop(folder)
            self._refused_before += sum(proxy.refused.values())
            task = asyncio.get_running_loop().create_task(proxy.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        proxies = list(self._proxies.values())
        self._proxies.clear()
        await asyncio.gather(*(p.aclose() for p in proxies), *self._closing)
