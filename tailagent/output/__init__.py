"""What leaves the process for people and machines to read: log lines for a terminal,
journald or JSON (logs.py), Prometheus metrics (metrics.py), and text from outside made
safe before it is shown (visible.py). Not what is kept (store/), nor the answers and
pages the server serves (the bridge, web/)."""
