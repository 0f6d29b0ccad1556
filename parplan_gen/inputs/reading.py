"""Reading input files safely: the size cap of each kind of input (and `input_limit`, which
overrides them all), and `read_bytes`/`read_text`, which refuse a missing, oversized, non-regular
(pipe, device, folder) or non-UTF-8 file before or while reading it, never reading more than the
limit. Parsing what was read is `source`'s job.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from parplan_gen.inputs.defaults import MIB
from parplan_gen.inputs.errors import SourceError, SourceRef

# The caps on what one input file may hold, checked before it is read. A kind of input whose
# cost is high per byte has its own (graph.MAX_GRAPH_BYTES, ruleset.MAX_RULE_FILE_BYTES,
# onnx_file.MAX_ONNX_BYTES, and source.MAX_YAML_BYTES); this one bounds any other read to
# memory a laptop can spare. `input_limit` (the CLI's --max-input-mib) replaces them all.
MAX_FILE_BYTES = 64 * MIB
INPUT_LIMIT_ENV = "PARPLAN_MAX_INPUT_MIB"
RAISE_HINT = f"raise it with `parplan --max-input-mib N` or {INPUT_LIMIT_ENV}=N"
# An override of every cap, set by `input_limit` (the CLI's --max-input-mib); None: the caps.
_LIMIT_OVERRIDE: ContextVar[int | None] = ContextVar("input_limit", default=None)


@contextmanager
def input_limit(max_bytes: int | None) -> Iterator[None]:
    """Within the block every input file may hold up to `max_bytes`, whatever the cap of its
    kind (None: the caps apply). The CLI's --max-input-mib sets it for one run."""
    token = _LIMIT_OVERRIDE.set(max_bytes)
    try:
        yield
    finally:
        _LIMIT_OVERRIDE.reset(token)


def size_limit(cap: int) -> int:
    """The size limit of an input whose kind is capped at `cap` bytes (see `input_limit`)."""
    override = _LIMIT_OVERRIDE.get()
    return cap if override is None else override


def _too_large(name: str, size: int | None, limit: int) -> SourceError:
    """The error for a file over its size limit (`size` None: found while reading it, its size
    unknown), saying how to raise the limit."""
    shown = f"is {size:,} bytes" if size is not None else f"holds more than {limit:,} bytes"
    mib = f"{limit / MIB:g}"
    cap = f"{mib} MiB" if float(mib) * MIB == limit else f"{limit:,} bytes"  # MiB when exact
    message = f"file {shown}; the limit is {cap} ({RAISE_HINT})"
    return SourceError(message, SourceRef(name))


_FILE_TYPES = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def not_regular_file(name: str, mode: int) -> SourceError:
    """The error for a path that exists but is no regular file (a folder, a pipe, a device)."""
    kind = next((what for test, what in _FILE_TYPES if test(mode)), "not a file")
    return SourceError(f"not a regular file ({kind})", SourceRef(name))


def read_bytes(path: str | Path, *, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file of at most `max_bytes` (default MAX_FILE_BYTES; see
    `input_limit`). A pipe or a device is refused without reading it (opening never waits for a
    writer), and no more than the limit is ever read, whatever the file's size says."""
    name = str(path)
    limit = size_limit(MAX_FILE_BYTES if max_bytes is None else max_bytes)
    try:
        mode = Path(path).stat().st_mode
        if not stat.S_ISREG(mode):
            raise not_regular_file(name, mode)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise SourceError("file not found", SourceRef(name)) from None
    except OSError as exc:
        raise SourceError(f"cannot read file: {exc.strerror}", SourceRef(name)) from None
    except ValueError:  # the name holds a NUL character
        raise SourceError("no file can have this name", SourceRef(name)) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # replaced since the check above
            raise not_regular_file(name, info.st_mode)
        if info.st_size > limit:
            raise _too_large(name, info.st_size, limit)
        raw = handle.read(limit + 1)
    if len(raw) > limit:  # it grew, or its size said 0 (/proc)
        raise _too_large(name, None, limit)
    return raw


def read_text(path: str | Path, *, max_bytes: int | None = None) -> str:
    """Read a UTF-8 text file, refusing missing, oversized and non-UTF-8 files (`read_bytes`)."""
    raw = read_bytes(path, max_bytes=max_bytes)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SourceError(
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
            SourceRef(str(path), line),
        ) from None
