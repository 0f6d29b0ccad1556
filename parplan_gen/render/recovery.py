"""What an interrupted write left in an output folder: the killed run's change completed where
its journal proves itself (render/journal.py), everything else of the writer's own removed.

The writer (render/writer.py) calls `recover` under the folder's lock before it compares, and
uses `settle` and `sync_folder` to end its own change the same way a recovery ends one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import warnings
from collections.abc import Iterable
from pathlib import Path

from parplan_gen.inputs.safe_text import printable
from parplan_gen.render.folder_lock import signals_held
from parplan_gen.render.journal import (
    JOURNAL_NAME,
    MAX_JOURNAL_BYTES,
    Journal,
    Seen,
    holds,
    is_staged,
    journal_key,
    read_journal,
)


class WriteWarning(UserWarning):
    """The writer found and repaired what an interrupted earlier write left in the folder."""


def kind(path: Path) -> str:
    """What is at `path`: absent, a folder (a real one: a symbolic link to a folder is replaced
    like a file) or a file (anything else that a rename replaces)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return "absent"
    return "folder" if stat.S_ISDIR(info.st_mode) else "file"


def exists(path: Path) -> bool:
    """Whether anything is at `path` (an OSError such as a name too long propagates)."""
    try:
        path.lstat()
    except FileNotFoundError:
        return False
    return True


def subfolders(names: Iterable[str]) -> list[str]:
    """The folder parts of rendered names (`deepspeed/plan.json` -> `deepspeed`)."""
    return sorted({n.split("/")[0] for n in names if "/" in n})


def settle(out: Path, journal: Journal) -> None:
    """After the renames: remove subfolders that retiring files emptied, sync, drop the journal."""
    for folder in subfolders(r.name for r in journal.removals):
        with contextlib.suppress(OSError):  # not empty: the plan or the user still has files there
            (out / folder).rmdir()
    sync_folder(out)
    (out / JOURNAL_NAME).unlink(missing_ok=True)


def sync_folder(out: Path) -> None:
    """Make the folder's entries (staged files, renames) durable; best effort where a file
    system cannot sync a folder."""
    fd = os.open(out, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


# ---- what an interrupted run left --------------------------------------------------------------


def recover(out: Path, folders: list[str]) -> None:
    """Complete the change a killed run's verified journal lists, discard a journal that does
    not verify, and remove staged files that no journal lists."""
    raw = _journal_text(out)
    if raw is not None:
        journal = read_journal(raw, out, journal_key(create=False))
        if journal is None:
            (out / JOURNAL_NAME).unlink(missing_ok=True)
            _warn(
                f"{_shown(out)}: discarded a journal that this user's parplan did not write, or "
                "a damaged one: nothing it names was renamed or removed"
            )
        else:
            _replay(out, journal)
            folders = sorted({*folders, *subfolders(s.name for s in journal.staged)})
    swept = sweep(out, folders)
    if swept:
        _warn(f"{_shown(out)}: removed {swept} staged file(s) left by an interrupted write")


def _replay(out: Path, journal: Journal) -> None:
    """Complete a verified journal's change, file by file, only where the staged file is the
    one the run wrote and its target is as the run saw it; say what was done and what was not."""
    renamed, removed, kept = 0, 0, []
    with signals_held():
        for staged in journal.staged:
            path, target = out / staged.name, out / staged.target
            if not holds(path, staged.size, staged.sha256):
                if exists(path):
                    kept.append(staged.target)
                continue  # renamed already, or swapped since: the sweep removes it
            if Seen.of(target) != staged.before:
                kept.append(staged.target)
                continue
            path.replace(target)
            renamed += 1
        for removal in journal.removals:
            if Seen.of(out / removal.name) == removal.before:
                (out / removal.name).unlink()
                removed += 1
            elif exists(out / removal.name):
                kept.append(removal.name)
        settle(out, journal)
    note = f"; left {', '.join(map(printable, kept))} as they are (changed since)" if kept else ""
    _warn(
        f"{_shown(out)}: completed an interrupted write ({renamed} staged file(s) renamed "
        f"into place, {removed} removed{note})"
    )


def _journal_text(out: Path) -> bytes | None:
    """The journal's bytes (at most MAX_JOURNAL_BYTES + 1); None without one, b"" for
    something named like it that is not a regular file (it is then discarded)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        handle = os.fdopen(os.open(out / JOURNAL_NAME, flags), "rb")
    except FileNotFoundError:
        return None
    except OSError:
        return b""  # a symbolic link, say: not the writer's
    with handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return b""
        return handle.read(MAX_JOURNAL_BYTES + 1)


def _shown(out: Path) -> str:
    return printable(str(out))


def _warn(message: str) -> None:
    warnings.warn(message, WriteWarning, stacklevel=6)  # at write_rendered's caller


def sweep(out: Path, subfolders: Iterable[str]) -> int:
    """Remove every staged file in the folder and in the plan's subfolders (under the lock,
    none is another run's; a subfolder that is a link is not looked into); how many."""
    folders = [out, *(out / s for s in subfolders if kind(out / s) == "folder")]
    debris = [
        p for folder in folders for p in folder.iterdir() if is_staged(p.name) and kind(p) == "file"
    ]
    for path in debris:
        path.unlink(missing_ok=True)
    return len(debris)
