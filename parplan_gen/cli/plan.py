"""`parplan plan` and `parplan check`: choose a layout, or check one a user already has.

A thin shell over `api` and `planner`; heavy modules are imported inside the handlers so that
`parplan --help` stays fast. `check` also reads an existing layout from a DeepSpeed
ds_config.json or a Megatron-LM argument file (the `--from-*` readers at the end).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from parplan_gen.cli.common import (
    LAYOUT_SIZES,
    TRAINED_MODEL_HELP,
    add_backend_option,
    add_batch_options,
    add_bound_options,
    add_budget_options,
    add_cluster_options,
    add_layout_options,
    add_rules_option,
    add_slurm_options,
    bounds_from_args,
    cluster_from_args,
    pins_from_args,
    positive_int,
    print_json,
)
from parplan_gen.cli.render import add_render_options, out_folder, write_plan_files
from parplan_gen.inputs.defaults import GIB
from parplan_gen.inputs.safe_text import printable
from parplan_gen.models.kind import ANY_BACKEND

if TYPE_CHECKING:
    from parplan_gen.api import CheckReport, Plan
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
CHECK_EXAMPLE = (
    "example:\n"
    "  parplan check llama-3-70b --gpus 64 --gpu h100 --tp 8 --pp 2 --mbs 1 --global-batch 256\n"
    "  parplan check llama-3-8b --gpus 8 --gpu h100 --from-deepspeed ds_config.json\n"
    "  parplan check llama-3-70b --gpus 64 --gpu h100 --from-megatron train_args.sh"
)


def add_plan_commands(sub: Any) -> None:
    """Register `plan` and `check` on the CLI's subparsers."""
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
    add_layout_options(
        plan, title="pins (any layout flag fixes that field; the rest is searched)",
        defaults=False, batch=False,
    )  # fmt: skip
    add_bound_options(plan)
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

    check = sub.add_parser(
        "check",
        help="pre-flight check of a layout you already have",
        description="Check a layout against the constraint rules, predict its memory against "
        "the GPU's and its throughput, and show a better plan if the planner finds one. "
        "Exit code 0 only when the layout runs as given; 1 when it breaks an `invalid` rule "
        "or does not fit (the report is printed all the same, the reason goes to stderr).",
        epilog=CHECK_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("model", metavar="MODEL", help=TRAINED_MODEL_HELP)
    add_cluster_options(check)
    layout = add_layout_options(
        check, title="layout (flags override --from-* files)", defaults=False
    )
    layout.add_argument("--from-deepspeed", metavar="FILE", help="read a DeepSpeed ds_config.json")
    layout.add_argument("--from-megatron", metavar="FILE", help="read Megatron-LM arguments")
    layout.add_argument(
        "--from-torchtitan", metavar="FILE", help="read torchtitan 0.3 --config and overrides"
    )
    add_backend_option(check, search=False)
    check.add_argument(
        "--any-backend",
        action="store_true",
        help="offer a better plan on any backend (default: on the layout's backend only)",
    )
    add_rules_option(check)
    check.add_argument("--json", action="store_true", help="print JSON")
    check.set_defaults(handler=_cmd_check)


def add_request_options(parser: argparse.ArgumentParser, *, slurm: bool = True) -> None:
    """MODEL, the cluster, the training options, --backend and --rules (`plan`, `compare`)."""
    parser.add_argument("model", metavar="MODEL", help=TRAINED_MODEL_HELP)
    add_cluster_options(parser)
    if slurm:
        add_slurm_options(parser)
    group = parser.add_argument_group("training")
    add_batch_options(group)
    add_backend_option(group, search=True)
    add_rules_option(parser)


# ---- plan --------------------------------------------------------------------------------------


def plan_request(args: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments of `api.plan` that `parplan plan`'s flags give."""
    return {
        "global_batch": args.global_batch,
        "seq_len": args.seq_len,
        "precision": args.precision,
        "objective": args.objective,
        "top": args.top,
        "flash_attention": not args.no_flash_attention,
        "backend": args.backend or ANY_BACKEND,
        "rules": args.rules,
        "pins": pins_from_args(args),
        "bounds": bounds_from_args(args),
        "headroom": args.headroom,
        "tokens": args.tokens,
        "days": args.days,
        "gpu_hour_price": args.gpu_hour_price,
    }


def _cmd_plan(args: argparse.Namespace) -> int:
    from parplan_gen.api import plan
    from parplan_gen.cli.textview import write_view

    if args.all_backends:
        from parplan_gen.cli.plan_all import cmd_plan_all

        return cmd_plan_all(args)
    result = plan(args.model, cluster_from_args(args), **plan_request(args))
    if args.out and result.feasible:
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

    cluster, memory = plan.document.cluster, plan.chosen.memory
    fix = next((a.note for a in plan.advice if a.fits), None)
    return NothingFitsError(
        (f"--out {out}: " if out else "")
        + f"nothing fits on {cluster.num_gpus} x {cluster.gpu.name} (the closest "
        f"layout needs {memory.total / GIB:.1f} GiB per GPU, the GPU has "
        f"{memory.capacity / GIB:.1f} GiB)"
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
        memory_lines,
        time_lines,
        warning_lines,
    )

    doc, feasible = plan.document, plan.feasible
    spec, cluster, chosen = doc.model, doc.cluster, doc.chosen
    lines = [
        f"{spec.title} on {cluster.num_gpus} x {cluster.gpu.name}, "
        f"{batch_text(spec, chosen)}, objective {plan.objective}",
        "",
        ("Chosen: " if feasible else "NOTHING FITS. Closest candidate: ")
        + f"{backend_text(chosen)}: {layout_line(chosen)}",
        "",
        spec.memory_heading,
        *memory_lines(chosen),
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
    th = estimate.throughput
    return (
        f"Throughput: {th.tokens_per_s:,.0f} {spec.unit}/s, "
        f"{th.model_tflops_per_gpu:.1f} model "
        f"TFLOP/s per GPU, MFU {th.mfu:.1%}"
    )


def _candidates_table(candidates: list[Estimate]) -> str:
    from parplan_gen.cli.estimate_view import layout_line
    from parplan_gen.cli.textview import table

    rows = [
        [
            str(i),
            f"{c.time.step_s:.3f}",
            f"{c.throughput.mfu:.1%}",
            f"{c.memory.total / GIB:.1f}",
            c.backend.name if c.backend else "-",
            layout_line(c),
        ]
        for i, c in enumerate(candidates, 1)
    ]
    return table(["#", "step s", "MFU", "GiB/GPU", "backend", "layout"], rows, right={0, 1, 2, 3})


def _rejected_lines(plan: Plan) -> list[str]:
    rejected = plan.document.rejected
    lines = [
        "",
        f"Searched {plan.searched:,} candidates ({plan.evaluated:,} estimated by the cost "
        f"model); rejected {sum(rejected.values()):,}, by reason:",
    ]
    lines += [f"  {n:>10,}  {printable(reason, len(reason))}" for reason, n in rejected.items()]
    return lines


# ---- check -------------------------------------------------------------------------------------


def _cmd_check(args: argparse.Namespace) -> int:
    from parplan_gen.api import check, load_model
    from parplan_gen.cli.textview import write_view
    from parplan_gen.cost.layout import build_layout

    spec, cluster = load_model(args.model), cluster_from_args(args)
    values = layout_values(args, spec)
    accum = values.pop("grad_accum", None)
    layout = build_layout(cluster.num_gpus, **values)
    if accum is not None and accum != layout.grad_accum:
        from parplan_gen.inputs.errors import InputError

        raise InputError(
            f"{args.from_deepspeed}: gradient_accumulation_steps({accum}) != global batch("
            f"{layout.global_batch}) / (mbs({layout.mbs}) * dp({layout.dp})) = {layout.grad_accum}"
        )
    read_from = (
        "deepspeed"
        if args.from_deepspeed
        else "megatron"
        if args.from_megatron
        else "torchtitan"
        if args.from_torchtitan
        else None
    )
    report = check(
        spec, cluster, layout, rules=args.rules, flash_attention=not args.no_flash_attention,
        backend=args.backend or read_from, any_backend=args.any_backend,
    )  # fmt: skip
    if args.json:
        print_json(report.contract())
    else:
        write_view(check_text(report))
    problem = report.problem()
    if problem is not None:  # the report is on stdout; the reason is the one-line error (exit 1)
        from parplan_gen.inputs.errors import InputError

        raise InputError(problem)
    return 0


def check_text(report: CheckReport) -> str:
    """The human view of `parplan check`."""
    from parplan_gen.cli.estimate_view import backend_text, estimate_text, layout_line

    lines = [estimate_text(report.model, report.cluster, report.estimate).rstrip("\n"), ""]
    if report.violations:
        lines.append("Constraints broken:")
        described = [v.describe() for v in report.violations]  # may quote a rule's reason
        lines += [f"  - {printable(d, len(d))}" for d in described]
    else:
        lines.append("Constraints: all met")
    better = report.better
    if better is None and not report.planner_found:
        lines.append("Better plan: none (no layout of this request fits and meets every rule)")
    elif better is None:
        lines.append("Better plan: none (the planner's best is not faster than this layout)")
    else:
        mine, theirs = report.estimate.time.step_s, better.time.step_s
        if report.violations:  # offered because this layout breaks a rule, not for speed
            label, gain = "Plan that meets every rule", ""
        else:
            label, gain = "Better plan", f", {mine / theirs:.2f}x faster"
        lines.append(
            f"{label}: {backend_text(better)}: {layout_line(better)} "
            f"({theirs:.3f} s per step{gain})"
        )
    return "\n".join(lines) + "\n"


# ---- reading existing layouts ------------------------------------------------------------------

LAYOUT_FLAGS = (*(dest for dest, _, _ in LAYOUT_SIZES), "global_batch", "seq_len")


def layout_values(args: argparse.Namespace, spec: TrainedModel) -> dict[str, Any]:
    """Layout fields: the defaults, then the --from-* files, then the explicit flags."""
    from parplan_gen.inputs.errors import UsageError
    from parplan_gen.render.readers import layout_from_files

    values: dict[str, Any] = {"tp": 1, "pp": 1}
    values.update(
        layout_from_files(
            spec,
            deepspeed=args.from_deepspeed,
            megatron=args.from_megatron,
            torchtitan=args.from_torchtitan,
        )
    )
    flags = {k: getattr(args, k) for k in LAYOUT_FLAGS if getattr(args, k) is not None}
    flags.update(
        {k: getattr(args, k) for k in ("recompute", "precision", "sequence_parallel")
         if getattr(args, k) is not None}
    )  # fmt: skip
    if args.zero is not None:
        flags.update(zero_stage=args.zero, distributed_optimizer=False)
    if args.distributed_optimizer:
        flags.update(distributed_optimizer=True, zero_stage=0)
    values.update(flags)
    if "global_batch" not in values:
        raise UsageError("give --global-batch (or a file that sets it)")
    values["seq_len"] = spec.sequence_length(values.get("seq_len"))
    return values
