"""An exclusive lock on a folder shared by separate processes, and the signal handling that
lets a short critical section (a group of renames) finish or clean up whatever ends it.

`locked` holds `flock` on a lock file inside the folder (removed on release: a waiting process
checks that the file it locked is still the one named there). `terminating_signals_raise`
turns SIGTERM/SIGHUP into SystemExit so that `finally` blocks run; `signals_held` defers
SIGINT/SIGTERM/SIGHUP until a block is done. POSIX only (fcntl, pthread_sigmask).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import NoReturn

from parplan_gen.render.checks import RenderError

# A write holds the lock for milliseconds (about ten small files). A lock held this long
# belongs to a stopped or hung run: waiting longer would only look like a hang.
LOCK_WAIT_S = 10.0
LOCK_POLL_S = 0.01  # how often a waiting run tries the lock again
LOCK_FILE_MODE = 0o644
# Signals whose default action ends the process with no cleanup: while writing, they raise
# SystemExit(128 + signal) instead (the shell's exit status for a process they end).
TERMINATING = (signal.SIGTERM, signal.SIGHUP)
HELD_DURING_RENAMES = {signal.SIGINT, *TERMINATING}


@contextlib.contextmanager
def locked(out: Path, name: str, *, shown: str) -> Iterator[None]:
    """Make `out` (and its parents) and hold the lock file `out/name`; a RenderError (showing
    the folder as `shown`) when another run holds it for over LOCK_WAIT_S. The lock file is removed on release, so a waiting run checks that the
    file it locked is still the one in the folder."""
    path, deadline = out / name, time.monotonic() + LOCK_WAIT_S
    while True:
        out.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, LOCK_FILE_MODE)
        except FileNotFoundError:  # a run that failed removed the folder it had made
            if time.monotonic() >= deadline:
                raise
            continue
        try:
            _wait_for_lock(fd, shown, deadline)
            if _still_linked(fd, path):
                break
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)


def _wait_for_lock(fd: int, shown: str, deadline: float) -> None:
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise RenderError(
                    f"{shown} is being written by another parplan run (still after "
                    f"{LOCK_WAIT_S:g} s); try again when it has finished"
                ) from None
            time.sleep(LOCK_POLL_S)


def _still_linked(fd: int, path: Path) -> bool:
    try:
        named = path.lstat()
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


@contextlib.contextmanager
def terminating_signals_raise() -> Iterator[None]:
    """While writing, SIGTERM and SIGHUP with their default action (which ends the process with
    no cleanup) raise SystemExit, so the temporary files are removed on the way out. Python
    sets handlers in the main thread only; elsewhere nothing changes."""
    replaced = {}
    if threading.current_thread() is threading.main_thread():
        for signum in TERMINATING:
            if signal.getsignal(signum) == signal.SIG_DFL:
                replaced[signum] = signal.signal(signum, _exit_on_signal)
    try:
        yield
    finally:
        for signum, handler in replaced.items():
            signal.signal(signum, handler)


def _exit_on_signal(signum: int, _frame: FrameType | None) -> NoReturn:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP back (in this thread) until the block is done."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_DURING_RENAMES)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
