"""Mends of dependencies' private internals, each applied only on the version it was
written for, else left out whole and said at start (versions.py).

What they mend: a2a-sdk's event queues, SQL stores, tracing and 0.3 JSON-RPC adapter,
Hypercorn's connection ends, acp's `$/cancel_request`. On the bottom floor: a mend
imports the library it mends, never tailagent above it. How tailagent merely configures
a dependency is not here (Hypercorn's settings are listening/serving.py).
"""
