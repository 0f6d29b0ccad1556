"""`parplan models` and `parplan estimate`: the transformer presets and the cost of one layout."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from parplan_gen.cost.layout import Layout

from parplan_gen.cli.common import (
    TRAINED_MODEL_HELP,
    ZERO_STAGES,
    add_cluster_options,
    add_rules_option,
    cluster_from_args,
    print_json,
    size_type,
    zero_stage,
)
from parplan_gen.inputs.defaults import DEFAULT_SEQ_LEN


def add_model_commands(sub: Any) -> None:
    """Register `models` and `estimate` on the CLI's subparsers."""
    models = sub.add_parser(
        "models",
        help="list the built-in model presets with their parameter counts",
        description="List the built-in transformer presets and native op graphs.",
        epilog="example:\n  parplan models --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    models.add_argument("--json", action="store_true", help="print JSON")
    models.set_defaults(handler=_cmd_models)

    estimate = sub.add_parser(
        "estimate",
        help="memory, time and throughput of one parallel layout",
        description="Estimate memory per GPU, time per step and throughput of one layout.",
        epilog="example:\n  parplan estimate llama-3-8b --gpus 8 --gpu h100 --tp 2 --pp 1 "
        "--mbs 2 --global-batch 512 --seq-len 8192 --distributed-optimizer",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    estimate.add_argument("model", metavar="MODEL", help=TRAINED_MODEL_HELP)
    add_cluster_options(estimate)
    add_layout_options(estimate)
    add_rules_option(estimate)
    estimate.add_argument("--json", action="store_true", help="print JSON (the plan contract)")
    estimate.set_defaults(handler=_cmd_estimate)


def add_layout_options(parser: argparse.ArgumentParser) -> None:
    """--tp --pp [--dp --cp --ep --vpp] --mbs --global-batch [--seq-len] and memory options."""
    group = parser.add_argument_group("layout")
    group.add_argument("--tp", type=size_type("tp"), default=1, help="tensor-parallel size")
    group.add_argument("--pp", type=size_type("pp"), default=1, help="pipeline-parallel size")
    group.add_argument(
        "--dp",
        type=size_type("dp"),
        default=None,
        help="data-parallel size (default: GPUs / (tp*pp*cp))",
    )
    group.add_argument("--cp", type=size_type("cp"), default=1, help="context-parallel size")
    group.add_argument("--ep", type=size_type("ep"), default=1, help="expert-parallel size")
    group.add_argument(
        "--vpp",
        type=size_type("vpp"),
        default=1,
        help="model chunks per pipeline rank (interleaved schedule when > 1)",
    )
    group.add_argument("--mbs", type=size_type("mbs"), default=1, help="micro-batch size")
    group.add_argument(
        "--global-batch",
        type=size_type("global_batch"),
        required=True,
        help="sequences per optimizer step",
    )
    group.add_argument(
        "--seq-len",
        type=size_type("seq_len"),
        default=None,
        help=f"tokens per sequence (default {DEFAULT_SEQ_LEN}; graph models have none)",
    )
    zero = group.add_mutually_exclusive_group()
    zero.add_argument("--zero", type=zero_stage, choices=ZERO_STAGES, default=0, help="ZeRO stage")
    zero.add_argument(
        "--distributed-optimizer", action="store_true", help="Megatron's distributed optimizer"
    )
    group.add_argument("--recompute", choices=("none", "selective", "full"), default="none")
    group.add_argument("--sequence-parallel", action="store_true")
    group.add_argument("--precision", choices=("bf16", "fp16", "fp8"), default="bf16")
    group.add_argument(
        "--no-flash-attention",
        action="store_true",
        help="attention scores are stored (no flash attention)",
    )


def layout_from_args(args: argparse.Namespace, world_size: int, seq_len: int) -> Layout:
    """The Layout the layout options describe (LayoutError with the equation if impossible)."""
    from parplan_gen.cost.layout import build_layout

    return build_layout(
        world_size,
        tp=args.tp,
        pp=args.pp,
        cp=args.cp,
        dp=args.dp,
        mbs=args.mbs,
        global_batch=args.global_batch,
        seq_len=seq_len,
        ep=args.ep,
        vpp=args.vpp,
        zero_stage=args.zero,
        distributed_optimizer=args.distributed_optimizer,
        sequence_parallel=args.sequence_parallel,
        recompute=args.recompute,
        precision=args.precision,
    )


def _cmd_models(args: argparse.Namespace) -> int:
    from parplan_gen.models.presets import graph_preset_names, load_preset, preset_names

    rows = []
    for name in preset_names():
        spec = load_preset(name)
        rows.append(
            {
                "name": name,
                "model_type": spec.model_type,
                "params": spec.total_params(),
                "active_params": spec.active_params(),
                "layers": spec.num_layers,
            }
        )
    from parplan_gen.models.graph_model import GraphModelSpec
    from parplan_gen.models.presets import load_graph_preset

    graphs = [GraphModelSpec.from_graph(load_graph_preset(n)) for n in graph_preset_names()]
    if args.json:
        print_json(
            {
                "transformers": rows,
                "graphs": [
                    {"name": g.name, "params": g.params, "forward_flops": g.forward_flops}
                    for g in graphs
                ],
            }
        )
        return 0
    from parplan_gen.cli.textview import table

    cells = [
        [
            r["name"],
            r["model_type"],
            f"{r['params'] / 1e9:,.2f}B",
            f"{r['active_params'] / 1e9:,.2f}B",
            str(r["layers"]),
        ]
        for r in rows
    ]
    out = table(["preset", "model_type", "params", "active", "layers"], cells, right={2, 3, 4})
    sys.stdout.write(out + "\nop graphs (per sample):\n")
    for g in graphs:
        flops = f"{g.forward_flops / 1e9:,.2f} GFLOP forward"
        sys.stdout.write(f"  {g.name}  {g.params / 1e6:,.2f}M params, {flops}\n")
    return 0


def _cmd_estimate(args: argparse.Namespace) -> int:
    from parplan_gen.cli.estimate_view import estimate_text
    from parplan_gen.cost.estimate import CostModel, estimate_from_figures, model_kind
    from parplan_gen.inputs.errors import InputError
    from parplan_gen.models.load import load_model, sequence_length
    from parplan_gen.planning.constraints import Constraints
    from parplan_gen.rules.ruleset import load_rules

    rules = load_rules(args.rules)
    spec = load_model(args.model)
    cluster = cluster_from_args(args)
    layout = layout_from_args(args, cluster.num_gpus, sequence_length(spec, args.seq_len))
    kind = model_kind(spec)
    model = CostModel(rules, kind)
    flash = not args.no_flash_attention
    env = model.layout_env(spec, cluster, layout, flash_attention=flash)
    # A layout that cannot exist (an `invalid` constraint, e.g. heads not divisible by tp) is an
    # error; one that merely does not fit is still estimated ("fits": false).
    constraints = Constraints(rules, kind)
    invalid = [v for v in constraints.check(env, "layout") if v.severity == "invalid"]
    if invalid:
        raise InputError("; ".join(v.describe() for v in invalid) + f" ({spec.name})")
    result = estimate_from_figures(layout, model.figures(env))
    if args.json:
        print_json(result.contract())
    else:
        sys.stdout.write(estimate_text(spec, cluster, result))
    return 0
