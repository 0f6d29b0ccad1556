"""The cluster file a profile writes: `gpu`, `num_gpus`, `gpus_per_node` and `measured:`, as
YAML in a fixed key order (the models' field order), one curve point per line, with a first
comment saying where it comes from (and, for a CPU profile, that it is for testing only).

Scalars are written as JSON writes them (strings double-quoted, escaped), floats with a decimal
point before any exponent (`1.0e-05`), which every YAML reader takes as a float. The file is
written whole or not at all (a temporary file beside it, then renamed over it).
"""

from __future__ import annotations

import json
import os
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from parplan_gen.cost.measured import Measured
from parplan_gen.inputs.errors import InputError
from parplan_gen.inputs.safe_text import printable

INDENT = "  "
COMMENT_WIDTH = 98  # a comment line, after its `# `, within 100 characters
# A float with an integral value up to 2^53 is written as the integer it is (a count of FLOPs).
EXACT_INTEGERS = 2**53


def cluster_document(
    gpu: str, num_gpus: int, gpus_per_node: int, measured: Measured
) -> dict[str, Any]:
    """The file's content, in its key order; a section not measured is left out."""
    section = measured.model_dump()
    return {
        "gpu": gpu,
        "num_gpus": num_gpus,
        "gpus_per_node": gpus_per_node,
        "measured": {key: value for key, value in section.items() if value is not None},
    }


def header(measured: Measured, gpu: str) -> list[str]:
    """The file's first comment lines."""
    origin = measured.provenance
    lines = [
        f"Written by `parplan profile` on {origin.date} from {printable(origin.gpu_name)}; "
        'docs/clusters.md, "Measured curves", says what each key holds.'
    ]
    if origin.device == "cpu":
        lines.insert(
            0,
            f"For testing only: measured on a CPU (--device cpu); `gpu: {gpu}` only names a "
            "catalog GPU so that the file loads, its figures are not that GPU's.",
        )
    return lines


def cluster_yaml(document: dict[str, Any], comments: list[str]) -> str:
    """`document` as YAML text, after `comments` (one `# ` line each)."""
    lines = [f"# {part}" for line in comments for part in textwrap.wrap(line, COMMENT_WIDTH)]
    lines += _mapping(document, 0)
    return "\n".join(lines) + "\n"


def write_file(path: str | Path, text: str) -> None:
    """Write `text` to `path` whole (a temporary file in its folder, renamed over it)."""
    target = Path(path)
    try:
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    except OSError as exc:
        raise InputError(f"cannot write {printable(str(path))}: {exc.strerror}") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        Path(temporary).replace(target)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise InputError(f"cannot write {printable(str(path))}: {exc.strerror}") from None


def _mapping(data: dict[str, Any], depth: int) -> list[str]:
    pad = INDENT * depth
    lines = []
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:")
            lines += _mapping(value, depth + 1)
        elif isinstance(value, list) and value:
            lines.append(f"{pad}{key}:")
            lines += [f"{pad}{INDENT}- {_flow(item)}" for item in value]
        else:
            lines.append(f"{pad}{key}: {_flow(value)}")
    return lines


def _flow(value: Any) -> str:
    """A scalar, an empty list, or a mapping of scalars, on one line."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key}: {_flow(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(item) for item in value) + "]"
    if isinstance(value, float):
        return _float(value)
    return json.dumps(value)


def _float(value: float) -> str:
    if value.is_integer() and abs(value) <= EXACT_INTEGERS:
        return str(int(value))
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    if e and "." not in mantissa:
        mantissa += ".0"
    return mantissa + e + exponent
