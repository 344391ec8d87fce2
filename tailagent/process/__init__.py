"""What a tailagent process does to itself at start: made not dumpable (undumpable.py),
its secrets taken out of environ (secret_env.py), its open-files limit raised
(descriptors.py), memory given back after a burst (memory.py), systemd's notify socket
spoken to (sd_notify.py), and where it runs from (origin.py). Not the socket it serves on
(listening/), nor its state dir (statedir/)."""
