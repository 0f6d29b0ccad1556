"""`parplan profile`: measure this machine's GPUs and write a cluster file with a `measured:`
section (docs/clusters.md, "Measured curves"). A thin shell over `parplan_gen.profile`: flags
in, the file (or YAML on stdout) and a summary out; torch is loaded only when the command runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from parplan_gen.cli.arg_types import positive_float
from parplan_gen.inputs.defaults import MIB
from parplan_gen.inputs.safe_text import printable_lines

if TYPE_CHECKING:
    from parplan_gen.profile.session import ProfileRun

US_PER_S = 1_000_000  # the summary shows a launch in microseconds
EPILOG = """examples:
  parplan profile --out cluster.yaml
  parplan profile --quick --gpu h100 --out cluster.yaml
  torchrun --standalone --nproc-per-node=8 -m parplan_gen.cli.main profile --out cluster.yaml
  parplan profile --device cpu --quick --out test_cluster.yaml"""


def add_profile_command(sub: Any) -> None:
    """Register `profile` on the CLI's subparsers."""
    profile = sub.add_parser(
        "profile",
        help="measure GEMM, attention, memory and collective curves on this machine's GPUs",
        description="Measure the per-operation curves the cost model prices from (GEMM rate by "
        "shape, attention by sequence length, memory copy bandwidth, collectives by size) on "
        "this machine's GPUs, and write them as a cluster file with a `measured:` section. "
        "Needs torch (pip install -e '.[profile]'). Under torchrun, the collectives run over "
        "all ranks; only rank 0 writes.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    profile.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cuda (default), or cpu: a tiny profile for testing the machinery, not a GPU's "
        "figures",
    )
    profile.add_argument(
        "--quick", action="store_true", help="shorter sweeps (a budget of about 1 minute)"
    )
    profile.add_argument(
        "--gpu",
        metavar="NAME",
        help="catalog GPU the file names (default: the device's own name, looked up in the "
        "catalog)",
    )
    profile.add_argument(
        "--out", metavar="FILE", help="write the cluster file here (default: print it)"
    )
    profile.add_argument(
        "--budget-s",
        type=positive_float,
        metavar="SECONDS",
        help="stop the sweeps after about this long (default: 600, --quick 60); the file says "
        "when they stopped early",
    )
    profile.set_defaults(handler=_cmd_profile)


def _cmd_profile(args: argparse.Namespace) -> int:
    from parplan_gen.profile.options import ProfileOptions
    from parplan_gen.profile.session import run_profile
    from parplan_gen.profile.writer import write_file

    options = ProfileOptions(
        device=args.device, quick=args.quick, gpu=args.gpu, budget_s=args.budget_s
    )
    run = run_profile(options, out=args.out, announce=_announce)
    if not run.writes:  # a rank other than 0 under torchrun
        return 0
    summary = _summary(run, args.out)
    if args.out is None:
        sys.stdout.write(run.text())
        sys.stderr.write(printable_lines(summary))
    else:
        write_file(args.out, run.text())
        sys.stdout.write(printable_lines(summary))
    return 0


def _announce(commands: tuple[str, ...], gpus: int) -> None:
    """Before a run alone on a machine of several GPUs: how to measure the collectives too."""
    sys.stderr.write(
        printable_lines(
            f"profile: {gpus} GPUs and one process: this run measures one GPU and no collective; "
            f"to measure them too (Ctrl-C, then):\n  {commands[0]}\n"
        )
    )


def _summary(run: ProfileRun, out: str | None) -> str:
    """What was measured, in a few lines, and the torchrun commands where they apply."""
    from parplan_gen.cost.measured import COLLECTIVES

    measured = run.measured
    origin = measured.provenance
    where = f"wrote {out}" if out is not None else "measured"
    units = "GPU(s)" if origin.device == "cuda" else "process(es)"
    lines = [
        f"{where}: {origin.gpu_name} as {run.gpu}, {run.num_gpus} {units}, "
        f"{run.gpus_per_node} per node ({origin.device}{', quick' if origin.quick else ''})"
    ]
    if measured.gemm is not None:
        for precision in ("bf16", "fp8"):
            points = getattr(measured.gemm, precision)
            if points:
                best = max(points, key=lambda p: p.tflops)
                lines.append(
                    f"  gemm {precision}: {len(points)} points, best {best.tflops:.4g} TFLOP/s "
                    f"(m={best.m} n={best.n} k={best.k})"
                )
    if measured.attention:
        best_attention = max(measured.attention, key=lambda p: p.tflops)
        lines.append(
            f"  attention: {len(measured.attention)} points, best "
            f"{best_attention.tflops:.4g} TFLOP/s (seq_len {best_attention.seq_len}, "
            f"{'causal' if best_attention.causal else 'full'}, {best_attention.mode})"
        )
    if measured.memory_bandwidth is not None:
        lines.append(f"  memory copy: {measured.memory_bandwidth.gb_per_s:.4g} GB/s")
    if measured.outside_allocator is not None:
        context_mib = measured.outside_allocator.context_bytes / MIB
        lines.append(f"  outside the allocator: {context_mib:.4g} MiB (CUDA context)")
    if measured.moe_host is not None:
        host = measured.moe_host
        lines.append(
            f"  host per launch: {host.launch_s * US_PER_S:.3g} us (Transformer Engine "
            f"{host.transformer_engine} GroupedLinear, {host.experts[0]} vs {host.experts[1]} "
            "experts)"
        )
    if measured.collectives is not None:
        coll = measured.collectives
        for op in COLLECTIVES:
            points = getattr(coll, op)
            if points:
                top = max(points, key=lambda p: p.bus_gb_per_s)
                lines.append(
                    f"  {op} ({coll.backend}, {top.ranks} ranks, {top.span}): {len(points)} "
                    f"points, best bus {top.bus_gb_per_s:.4g} GB/s at {top.bytes} B"
                )
    lines += [f"  skipped {s.sweep}: {s.reason}" for s in measured.skipped]
    if origin.stopped_early:
        lines.append(f"  stopped early: the budget of {origin.budget_s:g} s ran out")
    if run.torchrun:
        local, nodes = run.torchrun
        lines += [
            f"To measure the collectives too, on all {run.gpus_per_node} GPUs of this machine:",
            f"  {local}",
            "On several nodes (the same line on each; <NODE_RANK> 0 on <HOST>, the node of "
            "rank 0, then 1, 2, ...):",
            f"  {nodes}",
        ]
    return "\n".join(lines) + "\n"
