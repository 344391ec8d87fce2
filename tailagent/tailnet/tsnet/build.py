"""Builds the embedded node's shared library with Go (`go build -buildmode=c-shared`).

It imports nothing but the standard library, because setup.py runs it before
tailagent's dependencies exist. Run by hand: `python tailagent/tailnet/tsnet/build.py`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

SOURCE = Path(__file__).resolve().parent
LIBRARY_NAME = "libtailagent_tsnet.so"
GO_HINT = (
    "install Go 1.26.6 or newer (https://go.dev/dl/) and reinstall tailagent "
    "(pip install .), or run `python tailagent/tailnet/tsnet/build.py` in a checkout"
)


# Tailscale's own build tags for features a node may go without (feature/featuretags).
# The peerAPI server (Taildrop, exit-node DNS, Funnel ingress: nothing tailagent
# serves) would listen on a port of every interface of the box, though under tsnet
# its tailnet traffic reaches it inside the process anyway; left out, the embedded
# node holds no port outside the process.
FEATURES_LEFT_OUT = ("ts_omit_peerapiserver",)


class BuildFailed(Exception):
    """The library could not be built; str() is one line that says why."""


STARTING = (
    "tailagent: building the embedded tailnet node (serve --tsnet) with Go: a first build "
    "takes a few minutes, a rebuild seconds"
)


def build(destination: Path = SOURCE, say: Callable[[str], None] = print) -> Path:
    """Builds the library into `destination` and returns its path. Go's own build
    cache makes a second build of unchanged sources take seconds; a first one is
    minutes of no output, so `say` is told first (once Go is found)."""
    go = shutil.which("go")
    if go is None:
        raise BuildFailed(f"Go is not installed: {GO_HINT}")
    say(STARTING)
    destination = destination.resolve()  # go build runs in the source folder
    destination.mkdir(parents=True, exist_ok=True)
    target = destination / LIBRARY_NAME
    partial = target.with_suffix(".so.partial")
    argv = [go, "build", "-buildmode=c-shared", "-trimpath", "-ldflags=-s -w",
            f"-tags={','.join(FEATURES_LEFT_OUT)}", "-o", str(partial), "."]  # fmt: skip
    env = {**os.environ, "CGO_ENABLED": "1", "GOFLAGS": "-mod=mod"}
    result = subprocess.run(argv, cwd=SOURCE, env=env, capture_output=True, text=True)
    partial.with_suffix(".h").unlink(missing_ok=True)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        lines = result.stderr.strip().splitlines() or ["no output"]
        raise BuildFailed(f"go build of the embedded node failed: {lines[-1]}")
    partial.replace(target)
    return target


if __name__ == "__main__":
    try:
        print(f"built {build()}")
    except BuildFailed as exc:
        print(f"tailagent: {exc}", file=sys.stderr)
        sys.exit(1)
