"""The `parplan` console script. It imports the command line only when it runs, so that Ctrl-C
while Python loads it (some 50 ms of imports before `main` starts) ends as Ctrl-C anywhere else
in a run does: one error line and exit 130, no traceback."""

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


def run() -> int:
    """`parplan` as installed: the command line of `sys.argv`; its exit code."""
    try:
        from parplan_gen.cli.main import main
    except KeyboardInterrupt:
        return interrupted()
    return main()
