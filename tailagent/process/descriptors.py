"""The open-files limit, raised at start from the soft limit to the hard one.

Every connection, stream and agent pipe is a file descriptor. systemd starts a
service with a soft limit of 1,024 (kept low for programs that still wait with
select(), which cannot watch a descriptor past 1,023) under a hard one of 524,288,
and asks a program that needs more to raise its own soft limit; tailagent waits
with epoll (asyncio), so it does. At 1,024, one caller's streams had taken them all
and every other caller got 503. The shipped units name the same limits
(`LimitNOFILE=1024:524288`), so a manager configured lower still gives them.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("tailagent")

# Below this hard limit a busy server may run out (a few hundred streams and their
# whois lookups); said once at start, with what to change.
LOW_HARD_LIMIT = 4096


def raise_open_files_limit() -> None:
    """Raises the soft limit on open files to the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError) as exc:  # macOS refuses an unlimited soft limit
            log.warning("open files stay limited to %d: raising it to %d failed: %s",
                        soft, hard, exc)  # fmt: skip
            return
        log.info("open files: up to %d (raised from the soft limit, %d)", hard, soft)
    if hard < LOW_HARD_LIMIT:
        log.warning(
            "open files are limited to %d (the hard limit): streams and connections may "
            "run out; raise it (systemd: LimitNOFILE=1024:524288, a shell: ulimit -Hn)",
            hard,
        )
