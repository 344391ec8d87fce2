"""Building the one-file `tailagent` executable (build.py); never part of it."""
