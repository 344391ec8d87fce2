from tailagent.cli import run

run()
