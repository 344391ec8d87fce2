"""Builds the embedded tailnet node (Go, c-shared) into the package when Go is here.

Without Go the install still succeeds; `tailagent serve --tsnet` then says how to
get the node. Everything else about the package is in pyproject.toml.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


class build_with_node(build_py):  # setuptools names its commands in lower case
    def run(self) -> None:
        super().run()
        spec = importlib.util.spec_from_file_location(
            "tailagent_tsnet_build", HERE / "tailagent" / "tsnet" / "build.py"
        )
        assert spec is not None and spec.loader is not None
        builder = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(builder)
        # An editable install loads the package from the source tree: build there.
        where = HERE / "tailagent" / "tsnet"
        if not self.editable_mode:
            where = Path(self.build_lib) / "tailagent" / "tsnet"
        try:
            built = builder.build(where)
        except builder.BuildFailed as exc:
            say(f"WARNING: tailagent: no embedded tailnet node (serve --tsnet): {exc}")
            return
        say(f"tailagent: embedded tailnet node (serve --tsnet) built: {built}")


def say(line: str) -> None:
    """One line the person installing sees: pip shows a build's output only with -v,
    so it also goes to their terminal, when there is one."""
    print(line)
    try:
        with open("/dev/tty", "w") as terminal:
            terminal.write(line + "\n")
    except OSError:
        pass  # no terminal (CI, a container build): the -v output has it


setup(cmdclass={"build_py": build_with_node})
