"""What a hostile agent tries on the system directly, not through anything it asks:
plain `open()`, `os.listdir`, `git`, `os.kill`, sockets, a shell. Standard library only,
so both hostile fakes (tests/hostile_acp_agent.py, and tests/fake_claude_cli.py's
`attack` prompt) run it with any python3, as root or as `nobody`.

A plan is a JSON object of lists, one per kind of attempt; the answer maps
"kind target" to what happened: "ok: <what it got>" or "refused: <why>".
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SHOWN = 120  # characters of what an attempt got, enough to see a secret in it


def _refused(exc: BaseException) -> str:
    code = getattr(exc, "errno", None)
    name = errno.errorcode.get(code, "") if isinstance(code, int) else ""
    return f"refused: {name or type(exc).__name__} {exc}"[:200]


def read(target: str) -> str:
    return "ok: " + Path(target).read_text(errors="replace")[:SHOWN]


def listing(target: str) -> str:
    return "ok: " + " ".join(sorted(os.listdir(target))[:40])


def write(target: str) -> str:
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as out:
        out.write("planted by the agent\n")
    return "ok: wrote"


def signal(target: str) -> str:
    os.kill(int(target), 0)
    return "ok: can signal it"


def connect(target: str) -> str:
    """A unix socket path, or HOST:PORT."""
    if target.startswith("/"):
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(3)
            s.connect(target)
    else:
        host, _, port = target.rpartition(":")
        with socket.create_connection((host, int(port)), timeout=3):
            pass
    return "ok: connected"


def run(target: str) -> str:
    """A shell command line, run as the agent's own tools would."""
    done = subprocess.run(
        ["sh", "-c", target], capture_output=True, text=True, timeout=30, check=False
    )
    said = (done.stdout + done.stderr).strip().replace("\n", " | ")
    return ("ok: " if done.returncode == 0 else f"refused: exit {done.returncode} ") + said[:SHOWN]


def temp(_target: str) -> str:
    with tempfile.NamedTemporaryFile("w", delete=False) as out:
        out.write("scratch")
    return f"ok: {out.name}"


# What a lingering process runs: appends a line to its file every 100 ms, for ever.
_LINGER = (
    "import sys, time\n"
    "while True:\n"
    "    with open(sys.argv[1], 'a') as out:\n"
    "        out.write('still here\\n')\n"
    "    time.sleep(0.1)\n"
)


def linger(target: str) -> str:
    """Leaves a process behind that keeps appending to `target` after the turn: started
    from a child that exits at once, in a session of its own, so nothing of the agent's
    is its parent any more. Its command line names `target` (found from outside)."""
    path = str(Path(target).resolve())
    spawn = (
        "import subprocess, sys\n"
        "subprocess.Popen([sys.executable, '-c', sys.argv[1], sys.argv[2]], "
        "start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, "
        "stderr=subprocess.DEVNULL)\n"
    )
    subprocess.run([sys.executable, "-c", spawn, _LINGER, path], check=True, timeout=30)
    return f"ok: lingering on {path}"


def linger_thread(target: str) -> str:
    """A thread of the agent's own process that keeps appending to `target`."""
    path = str(Path(target).resolve())

    def grow() -> None:
        while True:
            with open(path, "a") as out:
                out.write("thread still here\n")
            time.sleep(0.1)

    threading.Thread(target=grow, daemon=True, name="linger").start()
    return f"ok: a thread lingers on {path}"


def serve(target: str) -> str:
    """A key set served on port `target` of every address the agent has, from a thread of
    its own process (as a forger of a node's keys would): it binds where it can."""
    import http.server
    import json

    body = json.dumps({"keys": [{"kty": "EC", "crv": "P-256", "kid": "the agent's"}]}).encode()

    class KeySet(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("0.0.0.0", int(target)), KeySet)
    threading.Thread(target=server.serve_forever, daemon=True, name="keyset").start()
    return f"ok: serving on 0.0.0.0:{target}"


def post(target: str) -> str:
    """A JSON `{"url", "via", "chain"}`: an A2A request carrying an actor chain, POSTed to
    `url` through the HTTP proxy `via` (HOST:PORT, asked even for a loopback `url`), or
    through the proxy variables' when `via` is empty."""
    import http.client
    import json
    import urllib.error
    import urllib.request

    asked = json.loads(target)
    headers = {"A2A-Version": "1.0", "A2A-Actor-Chain": asked["chain"],
               "Content-Type": "application/json"}  # fmt: skip
    if asked["via"]:
        host, _, port = asked["via"].rpartition(":")
        proxy = http.client.HTTPConnection(host, int(port), timeout=10)
        proxy.request("POST", asked["url"], body=b"{}", headers=headers)
        answer = proxy.getresponse()
        status, body = answer.status, answer.read()
        proxy.close()
    else:
        request = urllib.request.Request(asked["url"], data=b"{}", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status, body = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
    said = body[:200].decode(errors="replace").strip()
    return f"{'ok' if status < 400 else 'refused'}: {status} {said}"


KINDS = {
    "read": read,
    "list": listing,
    "write": write,
    "signal": signal,
    "connect": connect,
    "run": run,
    "temp": temp,
    "linger": linger,
    "linger_thread": linger_thread,
    "serve": serve,
    "post": post,
}


def carry_out(plan: dict[str, Any]) -> dict[str, str]:
    """Every attempt of the plan, each on its own (one refused never stops the next)."""
    results: dict[str, str] = {}
    for kind, targets in plan.items():
        for target in targets:
            try:
                results[f"{kind} {target}"] = KINDS[kind](str(target))
            except Exception as exc:
                results[f"{kind} {target}"] = _refused(exc)
    return results
