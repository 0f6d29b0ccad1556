"""`parplan render` and the options of `plan --out`: the flags only. What writes the files is
`cli/write_files.py`, imported when a command writes, so that a command that writes nothing
never loads the render layer."""

from __future__ import annotations

import argparse
from typing import Any

from parplan_gen.cli.common import add_slurm_options, site_from_args


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


def add_force_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--force: what a command that writes into a folder does with the files already there."""
    parser.add_argument(
        "--force", action="store_true", help="replace existing files whose content differs"
    )


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
    add_force_option(group)
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
        help="Megatron-LM template version, e.g. core_v0.16 (default: the latest shipped; "
        "not for op-graph models)",
    )
    group.add_argument(
        "--deepspeed-version",
        metavar="V",
        default=None,
        help="DeepSpeed template version, e.g. 0.19 (default: the latest shipped)",
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


def _cmd_render(args: argparse.Namespace) -> int:
    from parplan_gen.cli.write_files import write_plan_files
    from parplan_gen.planning.document import load_plan_document

    doc = load_plan_document(args.plan)
    # --slurm-*, --cpus-per-node: the launch files and the plan.json written with them take
    # the new values
    doc = doc.with_slurm(**site_from_args(args))
    return write_plan_files(doc, args.out, args)
