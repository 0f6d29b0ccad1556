"""`parplan frontier`: one plan per GPU type and count, and days to train against cost with the
Pareto front marked: the table (text view), frontier.json (`--json`), or frontier.json,
frontier.md and frontier.svg (`--out`). A thin shell over `api.frontier`; what writes files
(`cli/write_files.py`, the render layer) is imported only with `--out`."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, TextIO

from parplan_gen.cli.arg_types import positive_float, token_count_type
from parplan_gen.cli.common import (
    TRAINED_MODEL_HELP,
    add_backend_option,
    add_batch_options,
    add_rules_option,
    positive_int,
)
from parplan_gen.cli.exits import PROG
from parplan_gen.cli.out_options import add_force_option, out_folder
from parplan_gen.models.kind import ANY_BACKEND

if TYPE_CHECKING:
    from parplan_gen.planning.frontier import Frontier

FRONTIER_EXAMPLE = (
    "example:\n"
    "  parplan frontier llama-3-70b --gpu h100,h200,b200,mi300x --gpus 64,128,256,512,1024 "
    "--global-batch 1024 --seq-len 8192 --tokens 15T --gpu-hour-price h100=2.5,h200=3.0,"
    "b200=4.0,mi300x=2.0 --days 90 --out frontier/"
)


def add_frontier_command(sub: argparse._SubParsersAction) -> None:
    """Register `frontier` on the CLI's subparsers."""
    parser = sub.add_parser(
        "frontier",
        help="days to train against cost, over GPU types and counts, with the Pareto front",
        description="Plan the model on every GPU type and count given (the same search as "
        "`parplan plan --tokens`), and show each point's backend, layout, step time, MFU, days "
        "to train, GPU-hours and cost, with the Pareto front (no other point at least as soon "
        "and as cheap) marked. Without a price for every GPU type, points are compared on "
        "GPU-hours.",
        epilog=FRONTIER_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", metavar="MODEL", help=TRAINED_MODEL_HELP)
    points = parser.add_argument_group("points")
    points.add_argument(
        "--gpu", required=True, metavar="NAMES", help="GPU types from the catalog: h100,b200"
    )
    points.add_argument(
        "--gpus", required=True, metavar="COUNTS", help="GPU counts, whole nodes: 64,128,256"
    )
    group = parser.add_argument_group("training")
    add_batch_options(group)
    add_backend_option(group, search=True)
    budget = parser.add_argument_group("training budget")
    budget.add_argument(
        "--tokens", type=token_count_type, required=True, metavar="N", help="tokens to train (15T)"
    )
    budget.add_argument(
        "--gpu-hour-price",
        metavar="PRICES",
        help="price of one GPU-hour: one for every type (2.5) or per type (h100=2.5,b200=4.0); "
        "a type without one makes the front compare GPU-hours",
    )
    budget.add_argument(
        "--days", type=positive_float, metavar="D", help="mark the cheapest point within D days"
    )
    budget.add_argument(
        "--budget",
        type=positive_float,
        metavar="X",
        help="mark the soonest point that costs X or less (the price's units)",
    )
    add_rules_option(parser)
    parser.add_argument("--json", action="store_true", help="print frontier.json (the contract)")
    parser.add_argument(
        "--out",
        type=out_folder,
        metavar="DIR",
        help="write frontier.json, frontier.md and frontier.svg into DIR",
    )
    parser.add_argument(
        "--jobs",
        type=positive_int,
        default=None,
        metavar="N",
        help="plan the points in N processes (default: the CPUs this process may use)",
    )
    add_force_option(parser)
    parser.set_defaults(handler=_cmd_frontier)


def _cmd_frontier(args: argparse.Namespace) -> int:
    from parplan_gen.api import frontier
    from parplan_gen.cli.textview import write_view
    from parplan_gen.planning.frontier import to_json

    line = ProgressLine(sys.stderr)
    try:
        result = frontier(
            args.model,
            args.gpu,
            _counts(args.gpus),
            global_batch=args.global_batch,
            seq_len=args.seq_len,
            tokens=args.tokens,
            gpu_hour_price=args.gpu_hour_price,
            precision=args.precision,
            flash_attention=not args.no_flash_attention,
            backend=args.backend or ANY_BACKEND,
            rules=args.rules,
            days=args.days,
            budget=args.budget,
            jobs=args.jobs or _cpus(),
            progress=line.show if line.shown else None,
        )
    finally:
        line.close()
    if args.out:
        from parplan_gen.cli.write_files import write_files
        from parplan_gen.render.frontier_files import frontier_files

        stream = sys.stderr if args.json else sys.stdout
        write_files(args.out, frontier_files(result), [], args, stream=stream)
    if args.json:
        sys.stdout.write(to_json(result))
    else:
        write_view(frontier_text(result))
    return 0


def _cpus() -> int:
    """The CPUs this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else os.cpu_count() or 1


def _counts(text: str) -> list[int]:
    """`--gpus 64,128` as counts; a UsageError names the item that is no whole number."""
    from parplan_gen.inputs.errors import UsageError, shown_value
    from parplan_gen.inputs.number_text import ascii_decimal

    counts = []
    for item in text.split(","):
        try:
            value = ascii_decimal(item.strip())
        except ValueError:
            value = None
        if value is None or not value.is_integer():
            raise UsageError(f"--gpus: item {shown_value(item)} is not a whole number of GPUs")
        counts.append(int(value))
    return counts


class ProgressLine:
    """`parplan: frontier h100-sxm-80gb x 256 [3/28]` on stderr, while it is a terminal."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.shown = stream.isatty()

    def show(self, done: int, total: int, label: str) -> None:
        self.stream.write(f"\r\x1b[2K{PROG}: frontier {label} [{done}/{total}]")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()


def frontier_text(result: Frontier) -> str:
    """The human view: the table, then what the marks mean and the picks."""
    from parplan_gen.cli.textview import table
    from parplan_gen.planning.frontier import (
        TABLE_HEADERS,
        TABLE_RIGHT,
        front_line,
        mfu_line,
        pick_lines,
        table_rows,
    )

    lines = [
        f"{result.title}: {result.tokens:,.0f} tokens, global batch {result.global_batch}, "
        f"sequence {result.seq_len}",
        "",
        table(TABLE_HEADERS, table_rows(result), right=TABLE_RIGHT).rstrip("\n"),
        "",
        front_line(result),
        mfu_line(result),
        *pick_lines(result),
    ]
    return "\n".join(lines) + "\n"
