"""Write rendered files into a folder: checked first, never over a different file without
`force`, and the whole set as one change.

POSIX renames one file atomically, never a set. The set changes as one in this sense:

1. An exclusive lock (`flock` on LOCK_NAME in the folder) is held from the comparison with the
   files already there to the last rename. Two runs into one folder take turns, and the second
   compares against what the first wrote (so it is refused, or finds its files unchanged).
2. Every new file is written to a temporary file beside its target and synced.
3. A journal naming the staged files (and the files to remove) is written and synced; then the
   files are renamed into place with SIGINT, SIGTERM and SIGHUP held back, and the journal is
   removed. Ctrl-C or SIGTERM before this step removes the temporary files; during it, the
   signal waits until the set is in place.
4. A run killed outright (kill -9, a power cut) cleans nothing up. The next run into the folder,
   under the lock, completes the change a journal lists (its files were all staged and synced
   before the journal was written), removes temporary files that no journal lists, and says so
   with a WriteWarning. A mixed folder therefore always holds the journal that marks it.

Files of the user's own in the folder are kept; only the writer's own names (LOCK_NAME,
JOURNAL_NAME, `.NAME.parplan-XXXX.tmp`) are ever created or removed besides the rendered files.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
import tempfile
import warnings
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from parplan_gen.inputs.errors import UsageError
from parplan_gen.inputs.resources import shipped_dir
from parplan_gen.inputs.safe_text import printable
from parplan_gen.render.checks import RenderError, check_files
from parplan_gen.render.folder_lock import locked, signals_held, terminating_signals_raise

NCCL_REFERENCE = Path("nccl", "nccl_env.yaml")  # shared/reference/nccl_env.yaml, shipped
EXECUTABLE_SUFFIXES = (".sh", ".sbatch")
EXECUTABLE_MODE = 0o755
FILE_MODE = 0o644

LOCK_NAME = ".parplan.lock"  # held while a run writes; removed when it is done
JOURNAL_NAME = ".parplan.journal"  # exists only while (or when a killed run was) renaming
STAGED_INFIX = ".parplan-"  # staged files are named `.NAME.parplan-XXXX.tmp`
_STAGED = re.compile(r"\.(?P<target>.+)\.parplan-[a-z0-9_]+\.tmp")  # mkstemp's random part
# An existing file is compared in chunks of this many bytes (and only when its size is that of
# the new file), so the memory a comparison takes does not grow with the file.
COMPARE_CHUNK = 64 * 1024
# A journal names about ten staged files of some forty characters each; a larger file is not a
# journal this writer wrote (it is discarded unread).
MAX_JOURNAL_BYTES = 64 * 1024


class WriteWarning(UserWarning):
    """The writer found and repaired what an interrupted earlier write left in the folder."""


@dataclass
class _Change:
    """What one write does: files staged under temporary names, then renamed; files removed."""

    writes: dict[str, bytes] = field(default_factory=dict)
    staged: list[str] = field(default_factory=list)  # temporary names, in the folder
    removals: list[str] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict)  # name -> written/unchanged/removed


def output_folder(out_dir: str | Path) -> Path:
    """`out_dir` as a Path; a UsageError for a name that cannot be a folder ('' would silently
    mean the current folder; NUL cannot be passed to the system)."""
    text = os.fspath(out_dir)
    if text == "":
        raise UsageError("the output folder name is empty (for the current folder, give '.')")
    if "\0" in text:
        raise UsageError(f"output folder {printable(text)}: a name cannot hold a NUL character")
    return Path(text)


def write_rendered(
    out_dir: str | Path,
    files: Mapping[str, str],
    *,
    force: bool = False,
    retire: Collection[str] = (),
) -> dict[str, str]:
    """Write `files` into `out_dir` as one change; returns name -> "written" | "unchanged"
    (and "removed" for the names of `retire` that were removed).

    Every file is checked first, and every existing file compared first: if one differs and
    `force` is not given, nothing is written at all. `retire` names files an earlier plan may
    have left that this one does not have (megatron_args.sh for an op-graph model): an existing
    one is removed in the same change, and, like a different file, only with `force`.
    """
    out = output_folder(out_dir)
    check_files(files, nccl_reference=shipped_dir("templates") / NCCL_REFERENCE)
    for name in (*files, *retire):
        if not _plain_name(name):
            raise RenderError(
                f"rendered file name {printable(name)!r} is not a plain file name "
                "(no folder, not hidden: hidden names are the writer's own)"
            )
    data = {name: text.encode("utf-8") for name, text in files.items()}
    created = [p for p in (out, *out.parents) if not p.exists()]  # innermost first
    try:
        _check_folder(out)
        with terminating_signals_raise(), locked(out, LOCK_NAME, shown=_shown(out)):
            _recover(out)
            change = _compare(out, data, [n for n in retire if n not in data], force=force)
            _apply(out, change)
    except BaseException as exc:
        for folder in created:  # made on the way and still empty: removed again
            with contextlib.suppress(OSError):
                folder.rmdir()
        if isinstance(exc, OSError):
            raise RenderError(f"cannot write into {_shown(out)}: {exc.strerror or exc}") from None
        raise
    return change.status


def _plain_name(name: object) -> bool:
    """A name for a file in the folder: not empty, no folder part, not hidden, no NUL."""
    return (
        isinstance(name, str)
        and Path(name).name == name
        and not name.startswith(".")
        and "\0" not in name
    )


def _shown(out: Path) -> str:
    return printable(str(out))


def _check_folder(out: Path) -> None:
    """Refuse an `out` that exists as something other than a folder (a file, a device, a FIFO)
    or that is a symbolic link to nothing."""
    try:
        info = out.stat()
    except FileNotFoundError:
        if out.is_symlink():
            raise RenderError(
                f"--out {_shown(out)} is a symbolic link to a missing folder"
            ) from None
        return
    if not stat.S_ISDIR(info.st_mode):
        raise RenderError(f"--out {_shown(out)} exists and is not a folder")


# ---- comparing ---------------------------------------------------------------------------------


def _compare(out: Path, data: dict[str, bytes], retire: list[str], *, force: bool) -> _Change:
    """What the write must change; a RenderError, before anything is written, when that would
    replace or remove a file of different content without `force`, or replace a folder."""
    change, kinds = _Change(), {name: _kind(out / name) for name in (*data, *retire)}
    for name, blob in data.items():
        if kinds[name] == "file" and _holds(out / name, blob):
            change.status[name] = "unchanged"
        else:
            change.writes[name], change.status[name] = blob, "written"
    for name in retire:
        if kinds[name] != "absent":
            change.removals.append(name)
            change.status[name] = "removed"
    folders = [name for name in change.status if kinds[name] == "folder"]
    if folders:
        raise RenderError(
            f"{_shown(out)}: {', '.join(folders)}: a folder where the plan has a file; "
            "move it away (--force replaces files only)"
        )
    refusals = _refusals([name for name in change.writes if kinds[name] == "file"], change.removals)
    if refusals and not force:
        raise RenderError(f"{_shown(out)}: {'; '.join(refusals)}; pass --force to replace them")
    return change


def _refusals(different: list[str], leftover: list[str]) -> list[str]:
    refusals = []
    if different:
        refusals.append(f"will not overwrite {', '.join(different)} (content differs)")
    if leftover:
        refusals.append(f"will not remove {', '.join(leftover)} (not in this plan)")
    return refusals


def _kind(path: Path) -> str:
    """What is at `path`: absent, a folder (a real one: a symbolic link to a folder is replaced
    like a file) or a file (anything else that a rename replaces)."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return "absent"
    return "folder" if stat.S_ISDIR(info.st_mode) else "file"


def _holds(path: Path, blob: bytes) -> bool:
    """Whether `path` is, or links to, a regular file holding exactly `blob`: sizes are compared
    first, contents then in chunks; a FIFO or device is never opened for reading."""
    try:
        if not _regular_of_size(path.stat(), len(blob)):
            return False
        handle = os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb")
    except OSError:
        return False  # unreadable: it cannot be shown to be the same
    with handle:
        if not _regular_of_size(os.fstat(handle.fileno()), len(blob)):
            return False  # replaced since it was looked at
        chunks = range(0, len(blob), COMPARE_CHUNK)
        same = all(handle.read(COMPARE_CHUNK) == blob[i : i + COMPARE_CHUNK] for i in chunks)
        return same and handle.read(1) == b""


def _regular_of_size(info: os.stat_result, size: int) -> bool:
    return stat.S_ISREG(info.st_mode) and info.st_size == size


# ---- changing ----------------------------------------------------------------------------------


def _apply(out: Path, change: _Change) -> None:
    """Stage every new file, write the journal, then rename and remove as one change."""
    if not change.writes and not change.removals:
        return
    try:
        for name, blob in change.writes.items():
            mode = EXECUTABLE_MODE if name.endswith(EXECUTABLE_SUFFIXES) else FILE_MODE
            change.staged.append(_staged_write(out / name, blob, mode).name)
        _write_journal(out, change)
    except BaseException:  # a full disk, Ctrl-C, SIGTERM: nothing has been renamed yet
        _sweep(out)
        (out / JOURNAL_NAME).unlink(missing_ok=True)
        raise
    with signals_held():
        try:
            _finish(out, change)
        except OSError as exc:
            raise RenderError(
                f"cannot write into {_shown(out)}: {exc.strerror or exc}; the new files are "
                "staged there, and the next parplan run into that folder completes the change"
            ) from None
        except BaseException:  # an interrupt that got through: complete the change, then stop
            _finish(out, change)
            raise


def _staged_write(target: Path, data: bytes, mode: int) -> Path:
    """`data` in a new temporary file in the target's folder (synced, with `mode`); its path."""
    fd, tmp = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}{STAGED_INFIX}", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).chmod(mode)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _write_journal(out: Path, change: _Change) -> None:
    """The journal of `change`, synced with the folder before any rename starts."""
    text = json.dumps({"rename": change.staged, "remove": change.removals})
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    with os.fdopen(os.open(out / JOURNAL_NAME, flags, FILE_MODE), "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    _sync_folder(out)


def _finish(out: Path, change: _Change) -> int:
    """Rename each staged file still there into place, remove the retired files, then the
    journal; returns how many files were renamed. Doing it twice does it once."""
    renamed = 0
    for tmp in change.staged:
        with contextlib.suppress(FileNotFoundError):  # gone: renamed already
            (out / tmp).replace(out / _staged_target(tmp))
            renamed += 1
    for name in change.removals:
        (out / name).unlink(missing_ok=True)
    _sync_folder(out)
    (out / JOURNAL_NAME).unlink(missing_ok=True)
    return renamed


def _sync_folder(out: Path) -> None:
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


def _recover(out: Path) -> None:
    """Complete the change a killed run's journal lists, and remove unlisted staged files."""
    change = _read_journal(out)
    if change is not None:
        with signals_held():
            renamed = _finish(out, change)
        _warn(
            f"{_shown(out)}: completed an interrupted write ({renamed} staged file(s) renamed "
            f"into place, {len(change.removals)} removed)"
            if change.staged or change.removals
            else f"{_shown(out)}: removed an incomplete journal of an interrupted write"
        )
    swept = _sweep(out)
    if swept:
        _warn(f"{_shown(out)}: removed {swept} staged file(s) left by an interrupted write")


def _warn(message: str) -> None:
    warnings.warn(message, WriteWarning, stacklevel=4)  # at write_rendered's caller


def _read_journal(out: Path) -> _Change | None:
    """The change the folder's journal lists; None without one, an empty change for one that
    is not a complete journal (a run killed while writing it had not renamed anything)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        handle = os.fdopen(os.open(out / JOURNAL_NAME, flags), "rb")
    except FileNotFoundError:
        return None
    except OSError:
        return _Change()  # a symbolic link, say: not the writer's; it is removed
    with handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return _Change()
        raw = handle.read(MAX_JOURNAL_BYTES + 1)
    try:
        doc = json.loads(raw) if len(raw) <= MAX_JOURNAL_BYTES else {}
        staged, removals = list(doc["rename"]), list(doc["remove"])
    except (ValueError, TypeError, KeyError):
        return _Change()
    valid = all(map(_plain_name, map(_staged_target, staged))) and all(map(_plain_name, removals))
    return _Change(staged=staged, removals=removals) if valid else _Change()


def _staged_target(name: object) -> str:
    """The file a staged name is renamed to; "" for a name that the writer does not stage."""
    found = _STAGED.fullmatch(name) if isinstance(name, str) else None
    return found["target"] if found else ""


def _sweep(out: Path) -> int:
    """Remove every staged file in the folder (under the lock, none is another run's); how many."""
    debris = [p for p in out.iterdir() if _STAGED.fullmatch(p.name) and not p.is_dir()]
    for path in debris:
        path.unlink(missing_ok=True)
    return len(debris)
