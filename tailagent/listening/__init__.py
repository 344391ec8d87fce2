"""The socket the server listens on, loopback TCP or unix (listener.py), Hypercorn serving
on it (serving.py), and the probe that asks whether a tailagent answers there (probe.py).
Who a caller is belongs to access/; how the server is on the tailnet to tailnet/ and
tsnet/; the mends of Hypercorn's internals to mends/."""
