"""The command's name and how a run that Ctrl-C stops ends: what the console script
(`cli/entry.py`) and the command line (`cli/main.py`) share, so that neither imports the other
for it."""

from __future__ import annotations

import contextlib
import signal
import sys

PROG = "parplan"
# The exit status of a run Ctrl-C stops: 128 + SIGINT, as the shell reports a process SIGINT
# ends (and as `signal.SIGINT` numbers it on every POSIX system).
INTERRUPTED = 128 + signal.SIGINT


def interrupted() -> int:
    """Ctrl-C: one error line (a second Ctrl-C while it is written only cuts it short)."""
    with contextlib.suppress(KeyboardInterrupt, OSError):
        sys.stderr.write(f"{PROG}: error: interrupted\n")
    return INTERRUPTED
