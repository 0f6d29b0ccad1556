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
   under the lock, completes the change its journal lists if the journal proves to be this
   user's run's (render/journal.py: an HMAC under a key outside the folder, the run's token in
   every staged name, each staged file's SHA-256, each replaced or removed file as it was seen),
   removes staged files that no journal lists, and says so with a WriteWarning. A journal that
   does not prove itself is discarded: nothing it names is renamed or removed.

Files of the user's own in the folder are kept; only the writer's own names (LOCK_NAME,
JOURNAL_NAME, `.NAME.parplan-TOKEN-XXXX.tmp`) are ever created or removed besides the rendered
files. A rendered name may have one folder part (`plan --all-backends` writes DIR/<backend>/):
such a folder is made if missing, never followed if it is a symbolic link.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from parplan_gen.inputs.errors import UsageError
from parplan_gen.inputs.resources import shipped_dir
from parplan_gen.inputs.safe_text import printable
from parplan_gen.render.checks import RenderError, check_files
from parplan_gen.render.folder_lock import locked, signals_held, terminating_signals_raise
from parplan_gen.render.journal import (
    JOURNAL_NAME,
    STAGED_INFIX,
    Journal,
    Removal,
    Seen,
    Staged,
    digest,
    journal_bytes,
    journal_key,
    plain_name,
    staged_prefix,
)
from parplan_gen.render.recovery import (
    WriteWarning,
    exists,
    kind,
    recover,
    settle,
    subfolders,
    sweep,
    sync_folder,
)

__all__ = ["JOURNAL_NAME", "LOCK_NAME", "STAGED_INFIX", "WriteWarning", "write_rendered"]

NCCL_REFERENCE = Path("nccl", "nccl_env.yaml")  # shared/reference/nccl_env.yaml, shipped
EXECUTABLE_SUFFIXES = (".sh", ".sbatch")
EXECUTABLE_MODE = 0o755
FILE_MODE = 0o644

LOCK_NAME = ".parplan.lock"  # held while a run writes; removed when it is done
# An existing file is compared in chunks of this many bytes (and only when its size is that of
# the new file), so the memory a comparison takes does not grow with the file.
COMPARE_CHUNK = 64 * 1024


@dataclass
class _Change:
    """What one write does: files staged under temporary names, then renamed; files removed."""

    writes: dict[str, bytes] = field(default_factory=dict)
    seen: dict[str, Seen | None] = field(default_factory=dict)  # each name as compared
    removals: list[str] = field(default_factory=list)
    status: dict[str, str] = field(default_factory=dict)  # name -> written/unchanged/removed
    journal: Journal = field(default_factory=Journal)
    made: list[Path] = field(default_factory=list)  # subfolders this write made


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
    one is removed in the same change, and, like a different file, only with `force`. A name
    may be `FOLDER/NAME` (one level): the folder is made in the same change.
    """
    out = output_folder(out_dir)
    check_files(files, nccl_reference=shipped_dir("templates") / NCCL_REFERENCE)
    for name in (*files, *retire):
        if not plain_name(name):
            raise RenderError(
                f"rendered file name {printable(name)!r} is not a plain file name "
                "(at most one folder part, not hidden: hidden names are the writer's own)"
            )
    data = {name: text.encode("utf-8") for name, text in files.items()}
    subfolders = sorted({n.split("/")[0] for n in (*data, *retire) if "/" in n})
    created: list[Path] = []
    change = _Change()
    try:
        created = [p for p in (out, *out.parents) if not exists(p)]  # innermost first
        _check_folder(out)
        with terminating_signals_raise(), locked(out, LOCK_NAME, shown=_shown(out)):
            recover(out, subfolders)
            change = _compare(out, data, [n for n in retire if n not in data], force=force)
            _apply(out, change)
    except BaseException as exc:
        for folder in [*reversed(change.made), *created]:  # made on the way and still empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        if isinstance(exc, OSError):
            raise RenderError(f"cannot write into {_shown(out)}: {exc.strerror or exc}") from None
        raise
    return change.status


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
    _check_subfolders(out, {n.split("/")[0] for n in (*data, *retire) if "/" in n})
    change = _Change()
    change.seen = {name: Seen.of(out / name) for name in (*data, *retire)}
    kinds = {name: kind(out / name) for name in change.seen}
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


def _check_subfolders(out: Path, names: Iterable[str]) -> None:
    """Refuse a subfolder of the plan that exists as anything but a real folder: a symbolic
    link would take the write out of `out`, a file cannot hold one."""
    for name in sorted(names):
        if kind(out / name) == "file":
            raise RenderError(
                f"{_shown(out)}: {printable(name)}: a file or link where the plan has a folder; "
                "move it away"
            )


def _refusals(different: list[str], leftover: list[str]) -> list[str]:
    refusals = []
    if different:
        refusals.append(f"will not overwrite {', '.join(different)} (content differs)")
    if leftover:
        refusals.append(f"will not remove {', '.join(leftover)} (not in this plan)")
    return refusals


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
    journal = change.journal
    try:
        for name, blob in change.writes.items():
            mode = EXECUTABLE_MODE if name.endswith(EXECUTABLE_SUFFIXES) else FILE_MODE
            staged = _staged_write(out, name, blob, mode, change)
            journal.staged.append(Staged(staged, digest(blob), len(blob), change.seen[name]))
        journal.removals = [Removal(n, seen) for n in change.removals if (seen := change.seen[n])]
        _write_journal(out, journal)
    except BaseException:  # a full disk, Ctrl-C, SIGTERM: nothing has been renamed yet
        sweep(out, subfolders(change.status))
        (out / JOURNAL_NAME).unlink(missing_ok=True)
        raise
    with signals_held():
        try:
            _finish(out, journal)
        except OSError as exc:
            raise RenderError(
                f"cannot write into {_shown(out)}: {exc.strerror or exc}; the new files are "
                "staged there, and the next parplan run into that folder completes the change"
            ) from None
        except BaseException:  # an interrupt that got through: complete the change, then stop
            _finish(out, journal)
            raise


def _staged_write(out: Path, name: str, data: bytes, mode: int, change: _Change) -> str:
    """`data` in a new temporary file in the target's folder (synced, with `mode`, the run's
    token in its name); its name relative to `out`. A missing subfolder is made first."""
    target = out / name
    if target.parent != out and not target.parent.is_dir():
        target.parent.mkdir()
        change.made.append(target.parent)
    fd, tmp = tempfile.mkstemp(
        dir=target.parent, prefix=staged_prefix(name, change.journal.token), suffix=".tmp"
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
    return str(PurePosixPath(name).with_name(Path(tmp).name))


def _write_journal(out: Path, journal: Journal) -> None:
    """The journal, signed with this user's key (unsigned where there is none: the next run
    then completes nothing), staged and renamed into place, synced before any rename starts.
    A rename replaces whatever is named like the journal, a link included, never writing
    through it."""
    key = journal_key(create=True)
    blob = journal_bytes(journal, out, key)
    fd, tmp = tempfile.mkstemp(dir=out, prefix=staged_prefix(JOURNAL_NAME, journal.token))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(blob)
            handle.flush()
            os.fsync(handle.fileno())
        Path(tmp).chmod(FILE_MODE)
        # os.replace, not Path.replace: the tests stop a write at its n-th file rename
        os.replace(tmp, out / JOURNAL_NAME)  # noqa: PTH105
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    sync_folder(out)


def _finish(out: Path, journal: Journal) -> None:
    """Rename this run's staged files into place, remove the retired files, then the journal.
    Doing it twice does it once."""
    for staged in journal.staged:
        with contextlib.suppress(FileNotFoundError):  # gone: renamed already
            (out / staged.name).replace(out / staged.target)
    for removal in journal.removals:
        (out / removal.name).unlink(missing_ok=True)
    settle(out, journal)
