"""Write rendered files into a folder: checked first, atomically, never over a different file
without `force`."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from parplan_gen.render_checks import RenderError, check_files
from parplan_gen.resources import shipped_dir

NCCL_REFERENCE = Path("nccl", "nccl_env.yaml")  # shared/reference/nccl_env.yaml, shipped
EXECUTABLE_SUFFIXES = (".sh", ".sbatch")
EXECUTABLE_MODE = 0o755
FILE_MODE = 0o644


def write_rendered(
    out_dir: str | Path, files: dict[str, str], *, force: bool = False
) -> dict[str, str]:
    """Write `files` into `out_dir` atomically; returns name -> "written" | "unchanged".

    Every file is checked first, and every existing file compared first: if one differs and
    `force` is not given, nothing is written at all.
    """
    check_files(files, nccl_reference=shipped_dir("templates") / NCCL_REFERENCE)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise RenderError(f"--out {out} exists and is not a folder")
    status, pending, conflicts = {}, {}, []
    for name, text in files.items():
        if Path(name).name != name or name in ("", ".", ".."):
            raise RenderError(f"rendered file name {name!r} is not a plain file name")
        target, data = out / name, text.encode("utf-8")
        if target.is_dir():
            conflicts.append(f"{name} (a folder)")
        elif target.is_file() and target.read_bytes() == data:
            status[name] = "unchanged"
        elif target.exists() and not force:
            conflicts.append(name)
        else:
            pending[name] = data
    if conflicts:
        raise RenderError(
            f"{out}: will not overwrite {', '.join(conflicts)} (content differs); "
            "pass --force to replace them"
        )
    _write_all(out, pending)
    status |= dict.fromkeys(pending, "written")
    return {name: status[name] for name in files}


def _write_all(out: Path, pending: dict[str, bytes]) -> None:
    """Write every file in two steps: each into a temporary file next to its target, then, once
    all are written, each renamed into place. A failure while writing (a full disk) changes
    nothing; folders made here are removed again when the files could not all be placed."""
    created = [p for p in (out, *out.parents) if not p.exists()]  # innermost first
    staged: list[tuple[Path, Path]] = []
    placed: list[Path] = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, data in pending.items():
            mode = EXECUTABLE_MODE if name.endswith(EXECUTABLE_SUFFIXES) else FILE_MODE
            staged.append((_staged_write(out / name, data, mode), out / name))
        for tmp, target in staged:
            tmp.replace(target)  # os.replace: atomic within one file system
            placed.append(target)
    except OSError as exc:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        if created:
            for path in placed:
                path.unlink(missing_ok=True)
            for folder in created:
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
        raise RenderError(f"cannot write into {out}: {exc.strerror or exc}") from None


def _staged_write(target: Path, data: bytes, mode: int) -> Path:
    """`data` in a new temporary file in the target's folder (synced, with `mode`); its path."""
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
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
