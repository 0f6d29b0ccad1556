"""`parplan models` and `parplan estimate`: the transformer presets and the cost of one layout."""

from __future__ import annotations

import argparse
from typing import Any

from parplan_gen.cli.common import (
    TRAINED_MODEL_HELP,
    add_backend_option,
    add_cluster_options,
    add_layout_options,
    add_rules_option,
    cluster_from_args,
    layout_from_args,
    print_json,
)


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
    add_backend_option(estimate, search=False)
    add_rules_option(estimate)
    estimate.add_argument("--json", action="store_true", help="print JSON (the plan contract)")
    estimate.set_defaults(handler=_cmd_estimate)


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
    from parplan_gen.models.load import load_model

    graphs = [load_model(n) for n in graph_preset_names()]
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
    from parplan_gen.cli.textview import table, write_view

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
    lines = [out + "\nop graphs (per sample):"]
    for g in graphs:
        flops = f"{g.forward_flops / 1e9:,.2f} GFLOP forward"
        lines.append(f"  {g.name}  {g.params / 1e6:,.2f}M params, {flops}")
    write_view("\n".join(lines) + "\n")
    return 0


def _cmd_estimate(args: argparse.Namespace) -> int:
    from parplan_gen.api import estimate, load_model
    from parplan_gen.cli.estimate_view import estimate_text
    from parplan_gen.cli.textview import write_view
    from parplan_gen.inputs.errors import InputError
    from parplan_gen.planning.sanity import sanity_warnings
    from parplan_gen.rules.ruleset import load_rules

    rules = load_rules(args.rules)
    spec, cluster = load_model(args.model), cluster_from_args(args)
    layout = layout_from_args(args, cluster.num_gpus, spec.sequence_length(args.seq_len))
    found = estimate(
        spec, cluster, layout, rules=rules, flash_attention=not args.no_flash_attention,
        backend=args.backend,
    )  # fmt: skip
    # A layout that cannot exist (an `invalid` constraint, e.g. heads not divisible by tp) is an
    # error; one that merely does not fit is still estimated ("fits": false).
    invalid = [v for v in found.violations if v.severity == "invalid"]
    if invalid:
        raise InputError("; ".join(v.describe() for v in invalid) + f" ({spec.name})")
    if args.json:
        warnings = sanity_warnings(spec, cluster, found.estimate)
        print_json(found.estimate.contract() | ({"warnings": warnings} if warnings else {}))
    else:
        write_view(estimate_text(spec, cluster, found.estimate))
    return 0
