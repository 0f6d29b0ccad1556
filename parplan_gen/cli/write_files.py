"""Writing rendered files for `plan --out`, `plan --all-backends --out` and `parplan render`:
the rendering options from the flags (`cli/out_options.py` defines them), the write, and the
list of what was done. Imported only by a command that writes."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from parplan_gen.cli.exits import PROG
from parplan_gen.planning.document import PlanDocument
from parplan_gen.render.render_options import RenderOptions, write_plan
from parplan_gen.render.writer import WriteWarning, write_rendered


def render_options(args: argparse.Namespace) -> RenderOptions:
    """The rendering options that `out_options.add_render_options` defined, from parsed
    arguments."""
    return RenderOptions(
        templates=args.templates,
        force=args.force,
        hf_trainer=args.hf_trainer,
        force_nccl_algo=args.force_nccl_algo,
        megatron_version=args.megatron_version,
        deepspeed_version=args.deepspeed_version,
    )


def write_plan_files(
    doc: PlanDocument, out: str | Path, args: argparse.Namespace, *, stream: TextIO | None = None
) -> int:
    """Render `doc` with the rendering options in `args`, write it into `out`, and list the
    files on `stream` (default stdout; `parplan plan --json --out` passes stderr); what the
    writer repaired of an interrupted earlier write is told on stderr."""
    return _reported(out, lambda: write_plan(doc, out, render_options(args)), stream)


def write_files(
    out: str | Path,
    files: dict[str, str],
    retire: list[str],
    args: argparse.Namespace,
    *,
    stream: TextIO | None = None,
) -> int:
    """Write rendered `files` into `out` as one change (`retire`: names an earlier plan may
    have left), reported as `write_plan_files` reports."""
    return _reported(
        out, lambda: write_rendered(out, files, force=args.force, retire=retire), stream
    )


def _reported(out: str | Path, write: Callable[[], dict[str, str]], stream: TextIO | None) -> int:
    """Run `write`, telling on stderr what the writer repaired of an interrupted earlier write
    (even when the write is then refused), and list what it did on `stream` (default stdout)."""
    with warnings.catch_warnings(record=True) as repairs:
        warnings.simplefilter("always", WriteWarning)
        try:
            status = write()
        finally:
            for repair in repairs:
                sys.stderr.write(f"{PROG}: warning: {repair.message}\n")
    stream = stream or sys.stdout
    for name, state in status.items():
        stream.write(f"{state:9}  {Path(out) / name}\n")
    return 0
