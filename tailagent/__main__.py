"""`python -m tailagent`: the same command as `tailagent`."""

from tailagent.cli import run

run()
