"""`parplan plan`: search every layout, keep what fits, pick the best, and show why (the text
view), print the plan document (`--json`) or write it with its launch files (`--out`). A thin
shell over `api.plan`; `--all-backends` is `cli/plan_all.py`. What writes files
(`cli/write_files.py`, the render layer) is imported only with `--out`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from parplan_gen.cli.common import (
    add_bound_options,
    add_budget_options,
    add_layout_options,
    add_search_options,
    positive_int,
    print_json,
    setup_from_args,
)
from parplan_gen.cli.out_options import add_render_options, out_folder
from parplan_gen.cli.plan_all import cmd_plan_all
from parplan_gen.cli.plan_request import add_request_options, plan_request
from parplan_gen.inputs.defaults import GIB
from parplan_gen.inputs.safe_text import printable

if TYPE_CHECKING:
    from parplan_gen.api import Plan
    from parplan_gen.cost.estimate import Estimate
    from parplan_gen.models.kind import TrainedModel

PLAN_EXAMPLE = (
    "example:\n"
    "  parplan plan llama-3-8b --gpus 8 --gpu h100 --global-batch 512 --seq-len 8192\n"
    "  parplan plan llama-3-405b --gpus 16384 --gpu h100 --global-batch 2048 --seq-len 8192 "
    "--json\n"
    "  parplan plan llama-3-8b --gpus 8 --gpu h100 --global-batch 512 --out plan/\n"
    "  parplan plan llama-3-70b --gpus 64 --gpu h100 --global-batch 512 --tp 8 --max-pp 4 "
    "--headroom 10%\n"
    "  parplan plan llama-3-8b --gpus 64 --gpu h100 --global-batch 1024 --tokens 15T "
    "--gpu-hour-price 2.5\n"
    "  parplan plan llama-3-8b --gpus 8 --gpu h100 --global-batch 1024 --tokens 1T --days 30"
)


def add_plan_command(sub: Any) -> None:
    """Register `plan` on the CLI's subparsers."""
    plan = sub.add_parser(
        "plan",
        help="search every layout, keep what fits, pick the fastest, explain why",
        description="Search every parallel layout of the model on the cluster, reject those "
        "that break a constraint rule or do not fit, rank the rest by estimated step time "
        "(or memory) and show the best, the runners-up and what was rejected and why. When "
        "nothing fits, the closest candidate is shown with advice.",
        epilog=PLAN_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_request_options(plan)
    pins = "pins (any layout flag fixes that field; the rest is searched)"
    add_layout_options(plan, title=pins, defaults=False, batch=False)
    add_bound_options(plan)
    add_search_options(plan)
    add_budget_options(plan)
    plan.add_argument("--objective", choices=("time", "memory"), default="time")
    plan.add_argument("--top", type=positive_int, default=5, metavar="K", help="candidates shown")
    plan.add_argument("--json", action="store_true", help="print JSON (the plan contract)")
    plan.add_argument(
        "--all-backends",
        action="store_true",
        help="each backend's own best plan (the search restricted to it), in DIR/<backend>/ "
        "with --out; a backend that runs nothing gets no folder and the view says why",
    )
    plan.add_argument(
        "--out",
        type=out_folder,
        metavar="DIR",
        help="write plan.json and the launch files into DIR",
    )
    add_render_options(plan)
    plan.set_defaults(handler=_cmd_plan)


def _cmd_plan(args: argparse.Namespace) -> int:
    from parplan_gen.api import plan
    from parplan_gen.cli.textview import write_view

    if args.all_backends:
        return cmd_plan_all(args)
    result = plan(args.model, setup_from_args(args), **plan_request(args))
    if args.out and result.feasible:
        from parplan_gen.cli.write_files import write_plan_files

        write_plan_files(result.document, args.out, args, stream=sys.stderr)
    if args.json:
        print_json(result.document.contract())
    else:
        write_view(plan_text(result))
    if not result.feasible:  # the view or JSON says what would fit; exit 3 says it did not
        raise _nothing_fits(result, args.out)
    return 0


def _nothing_fits(plan: Plan, out: str | None) -> Exception:
    """The one line (exit 3) that ends a plan where nothing fits, after its view: no launch
    files are written for a layout that does not fit."""
    from parplan_gen.inputs.errors import NothingFitsError

    cluster = plan.document.cluster
    fix = next((a.note for a in plan.advice if a.fits), None)
    return NothingFitsError(
        (f"--out {out}: " if out else "")
        + f"nothing fits on {cluster.num_gpus} x {cluster.gpu.name} ({plan.closest_needs()})"
        + (f"; {fix}" if fix else "")
        + ("; no files written" if out else "")
    )


def plan_text(plan: Plan) -> str:
    """The human view of `parplan plan`."""
    from parplan_gen.cli.budget_view import budget_lines, search_line
    from parplan_gen.cli.estimate_view import (
        backend_text,
        batch_text,
        layout_line,
        measured_lines,
        memory_lines,
        time_lines,
        warning_lines,
    )

    doc, feasible = plan.document, plan.feasible
    spec, cluster, chosen = doc.model, doc.cluster, doc.chosen
    lines = [
        f"{spec.title} on {cluster.num_gpus} x {cluster.gpu.name}, "
        f"{batch_text(spec, chosen)}, objective {plan.objective}",
        *measured_lines(cluster),
        "",
        ("Chosen: " if feasible else "NOTHING FITS. Closest candidate: ")
        + f"{backend_text(chosen)}: {layout_line(chosen)}",
        "",
        spec.memory_heading,
        *memory_lines(chosen, cluster),
        "",
        "Time per step",
        *time_lines(chosen, spec),
        "",
        _throughput_line(chosen, spec),
        *budget_lines(doc),
        "",
        *([line, ""] if (line := search_line(doc)) else []),
        f"Top {len(doc.candidates)}" + ("" if feasible else " (none fits; least memory first)"),
        _candidates_table(doc.candidates),
        *_rejected_lines(plan),
    ]
    if doc.advice:
        advice = (f"  - {printable(note, len(note))}" for note in doc.advice)
        lines += ["", "What would make it fit:", *advice]
    lines += warning_lines(doc.warnings)
    return "\n".join(lines) + "\n"


def _throughput_line(estimate: Estimate, spec: TrainedModel) -> str:
    """Tokens/s, and the model TFLOP/s and MFU in the count the plan's backend logs
    (cost/mfu_convention.py), saying which."""
    from parplan_gen.cost.mfu_convention import convention_of, mfu_text

    th = estimate.throughput
    count = convention_of(estimate)
    return (
        f"Throughput: {th.tokens_per_s:,.0f} {spec.unit}/s, "
        f"{count.model_tflops(th):.1f} model "
        f"TFLOP/s per GPU, MFU {mfu_text(estimate)}"
    )


def _candidates_table(candidates: list[Estimate]) -> str:
    """The top candidates; their MFU in the chosen plan's count (the first), named in the
    header, so that the rows compare."""
    from parplan_gen.cli.estimate_view import layout_line
    from parplan_gen.cli.textview import table
    from parplan_gen.cost.mfu_convention import convention_of

    count = convention_of(candidates[0])
    rows = [
        [
            str(i),
            f"{c.time.step_s:.3f}",
            f"{count.mfu(c.throughput):.1%}",
            f"{c.memory.total / GIB:.1f}",
            c.backend.name if c.backend else "-",
            layout_line(c),
        ]
        for i, c in enumerate(candidates, 1)
    ]
    heads = ["#", "step s", count.header, "GiB/GPU", "backend", "layout"]
    return table(heads, rows, right={0, 1, 2, 3})


def _rejected_lines(plan: Plan) -> list[str]:
    rejected = plan.document.rejected
    lines = [
        "",
        f"Searched {plan.searched:,} candidates ({plan.evaluated:,} estimated by the cost "
        f"model); rejected {sum(rejected.values()):,}, by rule:",
    ]
    lines += [f"  {n:>10,}  {printable(reason, len(reason))}" for reason, n in rejected.items()]
    if plan.bounded:  # outside the search, not candidates: named, not counted
        bounds = "; ".join(printable(b, len(b)) for b in plan.bounded)
        lines.append(f"Not searched (a bound of the search rules, not a rejection): {bounds}")
    return lines
