"""The `parplan` console script. It imports the command line only when it runs, so that Ctrl-C
while Python loads it (some 50 ms of imports before `main` starts) ends as Ctrl-C anywhere else
in a run does: one error line and exit 130, no traceback."""

from __future__ import annotations

from parplan_gen.cli.exits import INTERRUPTED, interrupted

__all__ = ["INTERRUPTED", "run"]


def run() -> int:
    """`parplan` as installed: the command line of `sys.argv`; its exit code."""
    try:
        from parplan_gen.cli.main import main
    except KeyboardInterrupt:
        return interrupted()
    return main()
