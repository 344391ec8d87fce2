"""The state dir: files in it that only their owner may read, and the state dir closed to
its user at start (files.py); one server per state dir (lock.py). What those files hold
belongs to their users (access/, store/, the worktrees, tsnet/); where the state dir is
comes from the settings (config/)."""
