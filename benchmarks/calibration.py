"""Calibrate the cost model against published large-model training runs.

Every entry of both calibration files (default: published_runs.yaml and
published_runs_modern.yaml in ../shared/calibration/ next to the repository) and of the fitting
rows kept here (benchmarks/data/fitting_runs.yaml) becomes a
ModelSpec, a Cluster and a Layout (calibration_read.py, calibration_case.py), goes through
`planning.evaluate` on the backend that ran it (benchmarks/calibration_rows.yaml), and its
predicted TFLOP/s per GPU is compared with the published one: hardware FLOPs (recomputation
counted) where the source counts them, model FLOPs otherwise (the files' `conventions`). Rows
with no published figure are layout references, evaluated for `fits` only; rows that publish
peak memory are compared on it too. Rows that cannot be evaluated are listed with the reason,
and every assumption made for a row is listed beside it.

    python benchmarks/calibration.py [RUNS.yaml ...] [--rules DIR]   # table and MAPE
    python benchmarks/calibration.py --fit                            # fit the constants
    python benchmarks/calibration.py --validate                       # the validation rows

`--fit` searches the constants that datasheets cannot give (benchmarks/fit_parameters.yaml) by
coordinate descent on the MAPE of the evaluable rows and prints them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from calibration_case import case_from_entry, load_cases, published_figure
from calibration_cv import cross_validation_report
from calibration_fit import FastThroughput, leave_one_source_out
from calibration_read import (
    GIB,
    PERCENT,
    Case,
    NotEvaluableError,
    RowsFileError,
    Skipped,
    cluster_from_entry,
    inter_node_gbps,
    row_facts,
    row_table,
    spec_from_entry,
)
from calibration_validate import VALIDATION_RUNS, family_table, validation_files
from ruamel.yaml import YAML

from parplan_gen.cost.estimate import CostModel, MemoryBreakdown
from parplan_gen.inputs.errors import SourceRef
from parplan_gen.inputs.resources import builtin_rules_dir
from parplan_gen.models.kind import BackendName
from parplan_gen.planning.constraints import estimate_env
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.planning.pins import Headroom, SearchLimits, headroom_record
from parplan_gen.rules.ruleset import RuleSet, load_rules

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared" / "calibration"
DEFAULT_RUNS = SHARED / "published_runs.yaml"
MODERN_RUNS = SHARED / "published_runs_modern.yaml"
# Fitting rows found since, kept here with their sources (benchmarks/data/fitting_runs.yaml).
FITTING_RUNS = REPO / "benchmarks" / "data" / "fitting_runs.yaml"
MS = 1000  # milliseconds a second
__all__ = [
    "Case",
    "NotEvaluableError",
    "RowsFileError",
    "Skipped",
    "case_from_entry",
    "cluster_from_entry",
    "inter_node_gbps",
    "load_cases",
    "published_figure",
    "row_facts",
    "row_table",
    "spec_from_entry",
]
# The families errors are reported in (issue 15; calibration_rows.yaml says which rows).
FAMILIES = (
    "A100 Megatron",
    "ZeRO-3/DeepSpeed",
    "PyTorch FSDP (MPT)",
    "H100 Megatron/NeMo BF16",
    "H100 FP8",
    "B200",
    "MoE",
    "FSDP2",
    "H200 FP8",
)


def builtin_cost_rules(extra_rules: Sequence[str] = ()) -> RuleSet:
    """rules/cost (and `extra_rules` layered over it)."""
    return load_rules([builtin_rules_dir() / "cost", *extra_rules], builtin=False)


@dataclass
class Row:
    """One evaluated run."""

    case: Case
    predicted_tflops: float
    fits: bool
    predicted_memory_gib: float = 0.0  # the estimate's total (what `fits` judges)
    refused: str | None = None  # the first `invalid` rule its backend breaks
    compared_memory_gib: float = 0.0  # the figure set against the published memory

    @property
    def memory_error_pct(self) -> float | None:
        published = self.case.published_memory_gib
        return None if published is None else (self.compared_memory_gib / published - 1) * PERCENT

    @property
    def error_pct(self) -> float:
        assert self.case.published_tflops is not None, "a layout reference has no error"
        return (self.predicted_tflops / self.case.published_tflops - 1) * PERCENT


@dataclass
class Report:
    """Evaluated rows and skipped runs."""

    rows: list[Row] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def measured(self) -> list[Row]:
        return [r for r in self.rows if r.case.measured]

    @property
    def mape(self) -> float:
        rows = self.measured
        return sum(abs(r.error_pct) for r in rows) / max(1, len(rows))


# ---- evaluating ---------------------------------------------------------------------------------


def evaluators(rules: RuleSet) -> Callable[[Case], Evaluator]:
    """The Evaluator of a case's backend (one per backend)."""
    made: dict[Any, Evaluator] = {}

    def of(case: Case) -> Evaluator:
        if case.backend not in made:
            made[case.backend] = Evaluator(rules, backend=case.backend)
        return made[case.backend]

    return of


def evaluate(rules: RuleSet, cases: Sequence[Case]) -> list[Row]:
    """Predicted TFLOP/s per GPU of every case on its backend, in the metric its source uses."""
    rows = []
    of = evaluators(rules)
    for case in cases:
        evaluator = of(case)
        env = evaluator.env(
            case.spec, case.cluster, case.layout, flash_attention=case.flash_attention
        )
        evaluation = evaluator.evaluate_env(case.layout, case.with_facts(env))
        result = evaluation.estimate
        throughput = result.throughput
        predicted = (
            throughput.hardware_tflops_per_gpu
            if case.metric == "hardware"
            else throughput.model_tflops_per_gpu
        )
        refused = next((v.reason for v in evaluation.violations if v.severity == "invalid"), None)
        # The rules here are rules/cost only (no constraints): `fits` is rules/constraints'
        # memory.fits with no headroom, the predicted total against the GPU's memory.
        fits = result.memory.total <= case.cluster.gpu.memory_bytes
        compared = compared_memory(result.memory, case) / GIB
        rows.append(Row(case, predicted, fits, result.memory.total / GIB, refused, compared))
    return rows


def compared_memory(memory: MemoryBreakdown, case: Case) -> float:
    """The bytes to set against the published peak memory of `case`. A reserved peak (the
    caching allocator's `reserved_bytes.all.peak`, calibration_rows.yaml `memory_figure`) holds
    the tensors plus the allocator's cached free blocks, and not the CUDA context or NCCL's own
    buffers: the estimate's parts without `other`, plus what `plan` keeps free for the
    allocator by default (memory_kept_free at memory_headroom_share_default,
    rules/constraints/headroom.yaml: GMLake's share), so the comparison and the planner's
    fits-check add the same term. Otherwise the estimate's total."""
    if not case.memory_reserved_peak:
        return float(memory.total)
    return float(memory.total - memory.other) + planner_kept_free(memory, case)


def planner_kept_free(memory: MemoryBreakdown, case: Case) -> float:
    """What `plan`'s default headroom keeps free beside `memory` on the cluster of `case`,
    bytes (planning/pins.py headroom_record, the rule memory_kept_free)."""
    rules = full_rules()
    record = headroom_record(Headroom(), SearchLimits(), case.cluster, rules, case.layout.precision)
    figures = {f"memory_{k}": float(v) for k, v in memory.model_dump().items() if k != "fits"}
    env = {**estimate_env(figures), **record.memory_headroom.env()}
    return full_evaluator(case.backend).kept_free(env, {})


@cache
def full_evaluator(backend: BackendName | None) -> Evaluator:
    """The built-in rules' evaluator of transformers on `backend`, constraints included."""
    return Evaluator(full_rules(), "transformer", backend)


@cache
def full_rules() -> RuleSet:
    """The built-in rules, constraints included (for the headroom rule)."""
    return load_rules()


BREAKDOWN_COLUMNS = (
    "step_s",
    "compute_s",
    "elementwise_s",  # a named formula of time.yaml, part of compute_s
    "overlap_cost_s",  # what hidden communication costs the compute beside it
    "tp_comm_s",
    "pp_comm_s",
    "dp_comm_s",
    "bubble_s",
    "optimizer_s",
)


def case_figures(rules: RuleSet, case: Case) -> tuple[dict[str, Any], Mapping[str, float]]:
    """The formula environment of `case` on its backend and the estimate's figures."""
    model = CostModel(rules, backend=case.backend)
    env = case.with_facts(
        model.layout_env(case.spec, case.cluster, case.layout, flash_attention=case.flash_attention)
    )
    return env, model.figures(env)


def format_breakdown(rules: RuleSet, cases: Sequence[Case]) -> str:
    """Each run's predicted step time and its parts in seconds (dp_comm_s before overlap;
    compute_s includes elementwise_s, the memory-bound kernels)."""
    width = max([len(c.name) for c in cases] + [4])
    lines = [f"{'run':<{width}} " + " ".join(f"{c:>13}" for c in BREAKDOWN_COLUMNS)]
    for case in cases:
        env, figures = case_figures(rules, case)
        values = [
            named_value(rules, c, env) if c == "elementwise_s" else figures[f"time_{c}"]
            for c in BREAKDOWN_COLUMNS
        ]
        lines.append(f"{case.name:<{width}} " + " ".join(f"{v:13.3f}" for v in values))
    return "\n".join(lines) + "\n"


def step_s(rules: RuleSet, case: Case) -> float:
    """The predicted step time of `case`, seconds (the estimate's `time.step_s`)."""
    return float(case_figures(rules, case)[1]["time_step_s"])


def format_per_layer(rules: RuleSet, rows: Sequence[Row]) -> str:
    """Each measured run's step spread over the layers one GPU holds and the micro-batches of a
    step, priced and published, in ms: a cost the model misses that is fixed per layer and
    micro-batch (a host's launches) reads the same across rows of one host whatever their
    tokens, where a per-token one grows with the micro-batch. The published step is the
    priced one scaled by predicted / published TFLOP/s (both count the same FLOPs)."""
    measured = [r for r in rows if r.case.measured]
    width = max([len(r.case.name) for r in measured] + [4])
    head = ("layers/GPU", "micro-batches", "tokens/mb", "priced ms", "published ms", "missing ms")
    lines = [f"{'run':<{width}} " + " ".join(f"{c:>13}" for c in head)]
    for row in measured:
        layout, published = row.case.layout, row.case.published_tflops
        assert published is not None, "a measured row has a published figure"
        priced = step_s(rules, row.case)
        layers = row.case.spec.num_layers / layout.pp
        slices = layers * layout.grad_accum
        priced_ms = priced / slices * MS
        published_ms = priced * row.predicted_tflops / published / slices * MS
        values = (
            f"{layers:13.2f}",
            f"{layout.grad_accum:13d}",
            f"{layout.mbs * layout.seq_len // layout.cp:13d}",
            f"{priced_ms:13.2f}",
            f"{published_ms:13.2f}",
            f"{published_ms - priced_ms:13.2f}",
        )
        lines.append(f"{row.case.name:<{width}} " + " ".join(values))
    return "\n".join(lines) + "\n"


def format_report(report: Report) -> str:
    """The per-row table, the MAPE, the layout references, the skipped runs and the
    assumptions, as text."""
    name_width = max([len(r.case.name) for r in report.rows] + [4])
    head = (
        f"{'run':<{name_width}}  {'backend':<10} {'FLOPs':<8} {'predicted':>9} {'published':>9}"
        f" {'error':>8}  published figure from"
    )
    lines = [head, "-" * len(head)]
    for row in report.measured:
        flag = "" if row.fits else " (does not fit)"
        if row.memory_error_pct is not None:
            flag += (
                f" (peak memory {row.compared_memory_gib:.1f} GiB, published "
                f"{row.case.published_memory_gib:.1f}: {row.memory_error_pct:+.1f}%)"
            )
        lines.append(
            f"{row.case.name:<{name_width}}  {row.case.backend or '':<10} {row.case.metric:<8} "
            f"{row.predicted_tflops:9.1f} {row.case.published_tflops:9.1f} {row.error_pct:+7.1f}%"
            f"  {row.case.basis}{flag}"
        )
    lines.append("-" * len(head))
    lines.append(f"MAPE over {len(report.measured)} runs: {report.mape:.1f} %")
    references = [r for r in report.rows if not r.case.measured]
    if references:
        lines.append(f"\nlayout references (no published figure; fits only) ({len(references)}):")
        lines += [
            f"  {r.case.name} ({r.case.backend}): {'fits' if r.fits else 'does not fit'}"
            f" ({r.predicted_memory_gib:.1f} GiB)"
            for r in references
        ]
    refused = [r for r in report.rows if r.refused]
    if refused:
        lines.append("\nrefused by their backend's rules (evaluated all the same):")
        lines += [f"  {r.case.name} ({r.case.backend}): {r.refused}" for r in refused]
    if report.skipped:
        lines.append(f"\nnot evaluated ({len(report.skipped)}):")
        lines += [f"  {s.name}: {s.reason}" for s in report.skipped]
    notes = [(r.case.name, n) for r in report.rows for n in r.case.assumptions]
    if notes:
        lines.append("\nassumptions:")
        lines += [f"  {name}: {note}" for name, note in notes]
    return "\n".join(lines) + "\n"


# ---- fitting -----------------------------------------------------------------------------------

# The constants of rules/cost/ that no datasheet gives, with the range searched for each.
FIT_PARAMETERS_FILE = Path(__file__).resolve().parent / "fit_parameters.yaml"


def fit_parameters(
    path: Path = FIT_PARAMETERS_FILE,
) -> tuple[dict[str, tuple[float, float]], dict[str, float]]:
    """{formula name: (low, high)} of the constants `--fit` searches, and {formula name: the
    value that applies no correction} (fit_parameters.yaml `neutral`), from one read."""
    data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    ranges = {name: (float(lo), float(hi)) for name, (lo, hi) in data["parameters"].items()}
    neutral = {name: float(value) for name, value in (data.get("neutral") or {}).items()}
    return ranges, neutral


FIT_PARAMETERS, NEUTRAL = fit_parameters()
FIT_STEPS = 13  # grid points per parameter and sweep
FIT_SWEEPS = 6  # sweeps, each on a grid narrowed around the last best value
FIT_NARROWING = 0.35  # fraction of the previous range kept around the best value


def load_rules_with(constants: Mapping[str, float], extra_rules: Sequence[str]) -> RuleSet:
    """rules/cost (and `extra_rules`) with `constants` overriding their named formulas."""
    with tempfile.TemporaryDirectory() as tmp:
        lines = ["formulas:"] + [f"  {k}: {v!r}" for k, v in constants.items()]
        (Path(tmp) / "fit.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
        return load_rules([builtin_rules_dir() / "cost", *extra_rules, tmp], builtin=False)


def _grid(lo: float, hi: float) -> list[float]:
    return [lo + (hi - lo) * i / (FIT_STEPS - 1) for i in range(FIT_STEPS)]


def fit(
    score: Callable[[Mapping[str, float]], float],
    start: Mapping[str, float],
    *,
    verbose: bool = True,
) -> tuple[dict[str, float], float]:
    """Coordinate descent of `score` (a MAPE) over FIT_PARAMETERS; returns (constants, score)."""
    best = dict(start)
    best_mape = score(best)
    ranges = dict(FIT_PARAMETERS)
    for _ in range(FIT_SWEEPS):
        for name, (lo, hi) in ranges.items():
            for value in _grid(lo, hi):
                trial = best | {name: float(f"{value:.4g}")}  # 4 significant figures
                trial_mape = score(trial)
                if trial_mape < best_mape:
                    best, best_mape = trial, trial_mape
            half = (hi - lo) * FIT_NARROWING / 2
            bounds = FIT_PARAMETERS[name]
            ranges[name] = (max(bounds[0], best[name] - half), min(bounds[1], best[name] + half))
        if verbose:
            print(f"  sweep: MAPE {best_mape:.2f} % at {best}", file=sys.stderr)
    return best, best_mape


def named_value(rules: RuleSet, formula: str, env: Mapping[str, Any]) -> float:
    """The value of `formula` (named formulas of `rules` allowed) in `env`."""
    where = SourceRef("benchmarks/calibration.py")
    return float(rules.library.compile(formula, where, "estimate", "number").evaluate(env))


def current_constants(rules: RuleSet) -> dict[str, float]:
    """The present values of FIT_PARAMETERS in `rules`."""
    return {name: named_value(rules, name, {}) for name in FIT_PARAMETERS}


def cross_validate(rules: RuleSet, cases: Sequence[Case], extra_rules: Sequence[str]) -> str:
    """Fit on every measured row, then once per publication left out; the report."""
    fast = FastThroughput(rules, cases, extra_rules)
    start = current_constants(rules)
    full, _ = fit(fast.mape, start, verbose=False)
    rows = evaluate(load_rules_with(full, extra_rules), cases)

    # Each fold starts from the neutral values (no correction), not from the full fit: a
    # constant only the left-out source sets (the B200 scale, DeepSpeed's ZeRO-3 fractions, the
    # grouped-GEMM width) then predicts that source as the model would without it.
    fold_start = start | NEUTRAL

    def fit_on(training: Sequence[int]) -> dict[str, float]:
        return fit(lambda c: fast.mape(c, training), fold_start, verbose=False)[0]

    folds = leave_one_source_out(cases, fit_on)
    return cross_validation_report(fast, full, folds, rows, FAMILIES)


# ---- command line ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None, out: Callable[[str], object] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path)
    parser.add_argument("--rules", action="append", default=[], metavar="DIR")
    parser.add_argument("--fit", action="store_true", help="fit the efficiency constants")
    parser.add_argument(
        "--cross-validate",
        action="store_true",
        help="fit on all rows, then leave each source out; MAPE per family",
    )
    parser.add_argument("--breakdown", action="store_true", help="print each run's step time parts")
    parser.add_argument(
        "--per-layer",
        action="store_true",
        help="print each run's step per layer and micro-batch, priced and published (ms)",
    )
    parser.add_argument(
        "--validate",
        action="store_true",
        help=f"predict the validation rows (default {VALIDATION_RUNS.name}); error per family",
    )
    args = parser.parse_args(argv)
    args.runs = args.runs or (
        [VALIDATION_RUNS] if args.validate else [DEFAULT_RUNS, MODERN_RUNS, FITTING_RUNS]
    )
    missing = [str(p) for p in args.runs if not p.is_file()]
    if missing:
        out(f"no published runs at {', '.join(missing)} (give the path as an argument)")
        return 1
    try:
        cases, skipped = load_cases(*args.runs)
    except RowsFileError as exc:
        out(f"error: {exc}")
        return 2
    if args.fit or args.cross_validate:
        kept_apart = [str(p) for p in validation_files(args.runs)]
        kept_apart += [c.name for c in cases if c.validation]
        if kept_apart:
            out(f"{', '.join(kept_apart)}: validation rows are never fitted on")
            return 2
    rules = builtin_cost_rules(args.rules)
    if args.cross_validate:
        out(cross_validate(rules, cases, args.rules))
        return 0
    if args.fit:
        fast = FastThroughput(rules, cases, args.rules)
        constants, _ = fit(fast.mape, current_constants(rules))
        out("fitted constants (rules/cost/efficiency.yaml):")
        out("\n".join(f"  {k}: {v}" for k, v in constants.items()))
        rules = load_rules_with(constants, args.rules)
    report = Report(evaluate(rules, cases), skipped)
    out(format_report(report))
    if args.validate:
        out(family_table(report.rows, FAMILIES))
    if args.breakdown:
        out(format_breakdown(rules, cases))
    if args.per_layer:
        out(format_per_layer(rules, report.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
