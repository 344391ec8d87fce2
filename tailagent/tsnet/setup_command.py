"""The install step that builds the embedded node (pyproject.toml names it as
setuptools' build_py): the package as usual, then the Go library into it when Go is
here. Without Go the install still succeeds; `serve --tsnet` then says what to do."""

from __future__ import annotations

from pathlib import Path

from setuptools.command.build_py import build_py

from tailagent.tsnet.build import SOURCE, BuildFailed, build


class BuildWithNode(build_py):
    def run(self) -> None:
        super().run()
        # An editable install loads the package from the source tree: build there.
        where = SOURCE if self.editable_mode else Path(self.build_lib) / "tailagent" / "tsnet"
        try:
            built = build(where)
        except BuildFailed as exc:
            print(f"WARNING: tailagent: no embedded tailnet node: {exc}")
            return
        print(f"tailagent: embedded tailnet node built: {built}")
