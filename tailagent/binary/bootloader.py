"""The one-file binary is two processes; the one running tailagent dies with the one
the user started, and does not leave its unpacked files behind.

PyInstaller's bootloader (the `tailagent` file a user runs) unpacks Python into a
temporary directory (`_MEI…`, ~130 MB) and runs tailagent in a child process of the
same executable, then waits, and removes the directory once the child has ended. It
passes on the signals it can catch (Ctrl-C, SIGTERM), but nothing is caught of a
SIGKILL: a `kill -9` of the binary, or of a test that started it, left `tailagent
serve` and the agent it started running, orphaned, under a pid the user never saw,
and the directory in /tmp for good. The kernel's parent-death signal closes that: the
child asks for SIGTERM when its parent goes, stops as it would on a SIGTERM passed on
by the bootloader (a server's usual stop: its agent, its tailnet entry, its tasks),
and on its way out removes the directory the bootloader no longer can. Standard
library only; it runs in every process of the binary, after tailagent.process.undumpable.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1
UNPACKED_PREFIX = "_MEI"  # the one-file bootloader's directory; a one-folder build has none


def die_with_the_bootloader() -> None:
    """SIGTERM to this process when its parent, the bootloader, exits, and at once
    if it exited before this ran (this process then has another parent)."""
    unpacked = Path(getattr(sys, "_MEIPASS", ""))
    if not unpacked.name.startswith(UNPACKED_PREFIX):
        return  # not the child of a one-file bootloader
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
        reason = os.strerror(ctypes.get_errno())
        print(f"tailagent: warning: prctl(PR_SET_PDEATHSIG) failed: {reason}", file=sys.stderr)
        return
    atexit.register(_remove_if_orphaned, unpacked)
    if not _parent_is_the_bootloader():
        _remove_if_orphaned(unpacked)
        signal.raise_signal(signal.SIGTERM)


def _parent_is_the_bootloader() -> bool:
    """Whether the parent runs this same executable, as the bootloader does (it checks
    the same of its parent before starting Python). A bootloader killed before the
    prctl left this process to init or a subreaper, which runs something else or
    cannot be read."""
    try:
        return os.path.samefile("/proc/self/exe", f"/proc/{os.getppid()}/exe")
    except OSError:
        return False


def _remove_if_orphaned(unpacked: Path) -> None:
    """The unpacked directory, removed when its bootloader is gone (a living one
    removes it itself once this process has ended)."""
    if not _parent_is_the_bootloader():
        shutil.rmtree(unpacked, ignore_errors=True)
