"""`parplan render`: re-render a plan.json into launch files; shared options for `plan --out`."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from parplan_gen.cli.common import add_slurm_options, site_from_args

if TYPE_CHECKING:
    from parplan_gen.planning.document import PlanDocument
    from parplan_gen.render.render_options import RenderOptions


def add_render_commands(sub: Any) -> None:
    """Register `render` on the CLI's subparsers."""
    render = sub.add_parser(
        "render",
        help="render a plan.json into DeepSpeed, Megatron-LM, NCCL and launch files",
        description="Render the plan in PLAN_JSON (written by `parplan plan --out`) into "
        "ds_config.json, megatron_args.sh (transformers only), nccl.env, launch scripts, a "
        "hostfile and plan.md. "
        "Every file is checked before it is written; an existing different file is kept "
        "unless --force is given.",
        epilog="examples:\n  parplan render runs/llama/plan.json --out runs/llama-hf --hf-trainer\n"
        "  parplan render runs/llama/plan.json --out runs/llama-long --slurm-partition long\n"
        "  parplan render runs/llama/plan.json --out runs/llama-96 --cpus-per-node 96",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    render.add_argument("plan", metavar="PLAN_JSON", help="a plan.json written by parplan")
    render.add_argument(
        "--out", required=True, type=out_folder, metavar="DIR", help="folder to write into"
    )
    add_render_options(render)
    add_slurm_options(render)
    render.set_defaults(handler=_cmd_render)


def add_render_options(parser: argparse.ArgumentParser) -> None:
    """--templates --force --hf-trainer --force-nccl-algo --megatron-version --deepspeed-version."""
    group = parser.add_argument_group("rendering")
    group.add_argument(
        "--templates",
        metavar="DIR",
        default=None,
        help="folder of templates that override the built-in ones by relative name "
        "(e.g. DIR/nccl/nccl.env.j2, DIR/mapping.yaml)",
    )
    group.add_argument(
        "--force", action="store_true", help="replace existing files whose content differs"
    )
    group.add_argument(
        "--hf-trainer",
        action="store_true",
        help='ds_config.json for the Hugging Face Trainer: "auto" where the Trainer fills values in',
    )
    group.add_argument(
        "--force-nccl-algo",
        action="store_true",
        help="set NCCL_ALGO from the proposals instead of leaving it commented out",
    )
    group.add_argument(
        "--megatron-version",
        metavar="V",
        default=None,
        help="Megatron-LM template version, e.g. core_r0.13 (default: the latest shipped; "
        "not for op-graph models)",
    )
    group.add_argument(
        "--deepspeed-version",
        metavar="V",
        default=None,
        help="DeepSpeed template version, e.g. 0.16 (default: the latest shipped)",
    )


def out_folder(text: str) -> str:
    """An argparse type for --out: a name that can be a folder ('' is not the current one)."""
    from parplan_gen.inputs.errors import UsageError
    from parplan_gen.render.writer import output_folder

    try:
        output_folder(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None
    return text


def render_options(args: argparse.Namespace) -> RenderOptions:
    """The rendering options that `add_render_options` defined, from parsed arguments."""
    from parplan_gen.render.render_options import RenderOptions

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
    from parplan_gen.render.render_options import write_plan

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
    from parplan_gen.render.writer import write_rendered

    return _reported(
        out, lambda: write_rendered(out, files, force=args.force, retire=retire), stream
    )


def _reported(out: str | Path, write: Callable[[], dict[str, str]], stream: TextIO | None) -> int:
    """Run `write`, telling on stderr what the writer repaired of an interrupted earlier write
    (even when the write is then refused), and list what it did on `stream` (default stdout)."""
    from parplan_gen.cli.entry import PROG
    from parplan_gen.render.writer import WriteWarning

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


def _cmd_render(args: argparse.Namespace) -> int:
    from parplan_gen.planning.document import load_plan_document

    doc = load_plan_document(args.plan)
    # --slurm-*, --cpus-per-node: the launch files and the plan.json written with them take
    # the new values
    doc = doc.model_copy(update={"cluster": doc.cluster.with_slurm(**site_from_args(args))})
    return write_plan_files(doc, args.out, args)
