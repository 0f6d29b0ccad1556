"""`parplan models`: the built-in transformer presets and op graphs."""

from __future__ import annotations

import argparse
from typing import Any, TypedDict

from parplan_gen.cli.common import print_json


class _PresetRow(TypedDict):
    name: str
    model_type: str
    params: int
    active_params: int
    layers: int


def add_models_command(sub: Any) -> None:
    """Register `models` on the CLI's subparsers."""
    models = sub.add_parser(
        "models",
        help="list the built-in model presets with their parameter counts",
        description="List the built-in transformer presets and native op graphs.",
        epilog="example:\n  parplan models --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    models.add_argument("--json", action="store_true", help="print JSON")
    models.set_defaults(handler=_cmd_models)


def _cmd_models(args: argparse.Namespace) -> int:
    from parplan_gen.models.presets import graph_preset_names, load_preset, preset_names

    rows: list[_PresetRow] = []
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
    from parplan_gen.models.any_model import graph_of
    from parplan_gen.models.load import load_model

    # a graph preset always loads as a GraphModelSpec
    graphs = [g for n in graph_preset_names() if (g := graph_of(load_model(n))) is not None]
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
