"""Builds the embedded tailnet node (Go, c-shared) into the package when Go is here.

Without Go the install still succeeds; `tailagent serve --tsnet` then says how to
get the node. Everything else about the package is in pyproject.toml.
"""

from __future__ import annotations

import importlib.util
import time
import warnings
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class build_with_node(build_py):  # setuptools names its commands in lower case
    def run(self) -> None:
        super().run()
        spec = importlib.util.spec_from_file_location(
            "tailagent_tsnet_build", HERE / "tailagent" / "tailnet" / "tsnet" / "build.py"
        )
        assert spec is not None and spec.loader is not None
        builder = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(builder)
        # An editable install loads the package from the source tree: build there.
        where = HERE / "tailagent" / "tailnet" / "tsnet"
        if not self.editable_mode:
            where = Path(self.build_lib) / "tailagent" / "tailnet" / "tsnet"
        started = time.monotonic()
        try:
            built = builder.build(where, say=say)
        except builder.BuildFailed as exc:
            say(f"tailagent: no embedded tailnet node (serve --tsnet): {exc}", outcome=True)
            return
        took = round(time.monotonic() - started)
        say(f"tailagent: embedded tailnet node (serve --tsnet) built in {took} s: {built}", True)


def say(line: str, outcome: bool = False) -> None:
    """One line the person installing sees. pip hides a build's output unless -v, and
    shows nothing during it but "still running...": so the line goes to their terminal
    at once, when there is one (the only way to say a long build starts). pip 26 also
    shows a build backend's warnings, after the build, terminal or not (a CI log): the
    outcome goes there too (pip 23-25, venv's own included, drop it: -v has it)."""
    print(line)
    try:
        with open("/dev/tty", "w") as terminal:
            terminal.write("\n" + line + "\n")
    except OSError:
        pass  # no terminal (CI, a container build)
    if outcome:
        # No source line to quote, so pip prints the line alone: "tailagent:0: ...".
        warnings.warn_explicit(line.removeprefix("tailagent: "), UserWarning, "tailagent", 0)


setup(cmdclass={"build_py": build_with_node})
