"""The one-file binary's entry point: the `tailagent` command itself."""

from tailagent.cli import run

run()
