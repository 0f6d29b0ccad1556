"""Calibrate the graph cost model (rules/cost/graph.yaml) against published ResNet-50 training.

Every row of `benchmarks/data/resnet50_dle.yaml` (NVIDIA DeepLearningExamples, ResNet-50 v1.5,
pytorch-21.03 NGC container) becomes the `resnet-50` preset's GraphModelSpec, a Cluster (the
row's cluster file) and a Layout (dp = GPUs, tp 1, mbs = the batch per GPU, grad_accum 1,
ZeRO 0, fp16), goes through `planning.evaluate`, and its predicted images/s
is compared with the published one. Rows the cost model cannot take (TF32 / FP32: no such
precision in the GPU catalog) are listed with the reason.

Roles: the single-GPU mixed-precision rows are the ones `graph_matmul_efficiency` is fitted to
("fit"); the 8-GPU mixed-precision rows are evaluated and reported apart ("scaling"): their
published strong scaling (6.7-7.0x on 8 GPUs) comes from costs the model does not have (the
input pipeline), so they are not fitted.

    python benchmarks/calibration_graph.py [DATA.yaml] [--rules DIR] [--breakdown]
    python benchmarks/calibration_graph.py --fit     # fit graph_matmul_efficiency

`--fit` minimises the mean absolute log error of the "fit" rows over the one constant (a coarse
grid, then golden-section search), with the rules loaded with an overlay that overrides that
named formula, and prints it to 4 significant digits; copy it into rules/cost/graph.yaml.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from calibration import NotEvaluableError, Skipped, load_rules_with, named_value
from ruamel.yaml import YAML

from parplan_gen.cost.estimate import CostModel
from parplan_gen.cost.hardware import Cluster, load_cluster
from parplan_gen.cost.layout import Layout, build_layout
from parplan_gen.inputs.errors import ParplanError
from parplan_gen.inputs.resources import builtin_rules_dir
from parplan_gen.models.graph_model import GraphModelSpec
from parplan_gen.models.load import load_model
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.rules.ruleset import RuleSet, load_rules

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO / "benchmarks" / "data" / "resnet50_dle.yaml"
FITTED = "graph_matmul_efficiency"  # the one constant --fit searches
PERCENT = 100

Role = Literal["fit", "scaling"]
# The table columns' precisions the cost model has: AMP (fp16 autocast) only. TF32 and FP32 are
# neither in the GPU catalog (bf16 / fp16 / fp8 peaks) nor among the layout's precisions.
PRECISIONS = {"amp": "fp16"}
NOT_MODELLED = {
    "tf32": "TF32 is not modelled: the GPU catalog has no TF32 peak (bf16/fp16/fp8 only) and "
    "the cost model's precisions are bf16/fp16/fp8",
    "fp32": "FP32 is not modelled: the GPU catalog has no FP32 (CUDA-core) peak and the cost "
    "model's precisions are bf16/fp16/fp8",
}
REQUIRED_FIELDS = ("name", "gpus", "precision", "batch_per_gpu", "images_per_s", "cluster")

# Golden-section search after a coarse grid (the objective is one-dimensional and, around its
# minimum, unimodal).
FIT_RANGE = (0.2, 1.0)
FIT_GRID_STEP = 0.05
FIT_TOLERANCE = 1e-5
GOLDEN = (math.sqrt(5) - 1) / 2


@dataclass(frozen=True)
class Case:
    """One published row, ready for the cost model."""

    name: str
    spec: GraphModelSpec
    cluster: Cluster
    layout: Layout
    role: Role
    published: float  # images/s
    source: Mapping[str, Any]


@dataclass(frozen=True)
class Row:
    """One evaluated row."""

    case: Case
    predicted: float  # images/s
    fits: bool

    @property
    def error_pct(self) -> float:
        return (self.predicted / self.case.published - 1) * PERCENT

    @property
    def log_error(self) -> float:
        return math.log(self.predicted / self.case.published)


@dataclass
class Report:
    """Evaluated rows and skipped ones."""

    rows: list[Row] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    def of(self, role: Role) -> list[Row]:
        return [r for r in self.rows if r.case.role == role]

    def mape(self, role: Role) -> float:
        rows = self.of(role)
        return sum(abs(r.error_pct) for r in rows) / max(1, len(rows))

    def mean_abs_log_error(self, role: Role) -> float:
        rows = self.of(role)
        return sum(abs(r.log_error) for r in rows) / max(1, len(rows))


# ---- reading the data -------------------------------------------------------------------------


def cluster_from_row(row: Mapping[str, Any]) -> Cluster:
    """The row's `cluster` block read as a cluster file (docs/clusters.md), overrides included."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{row['name']}.yaml"
        with path.open("w", encoding="utf-8") as handle:
            YAML(typ="safe").dump(dict(row["cluster"]), handle)
        return load_cluster(path)


def case_from_row(row: Mapping[str, Any], spec: GraphModelSpec) -> Case:
    """A Case of one row (NotEvaluableError when the cost model cannot take it)."""
    missing = [k for k in REQUIRED_FIELDS if row.get(k) is None]
    if missing:
        raise NotEvaluableError(f"the row has no {', '.join(missing)}")
    precision = str(row["precision"]).lower()
    if precision not in PRECISIONS:
        raise NotEvaluableError(NOT_MODELLED.get(precision, f"unknown precision {precision!r}"))
    gpus, batch = row["gpus"], row["batch_per_gpu"]
    try:
        cluster = cluster_from_row(row)
        layout = build_layout(
            gpus, tp=1, dp=gpus, mbs=batch, global_batch=batch * gpus, seq_len=1,
            zero_stage=0, recompute="none", precision=PRECISIONS[precision],
        )  # fmt: skip
    except ParplanError as exc:
        raise NotEvaluableError(exc.render()) from None
    role: Role = "fit" if gpus == 1 else "scaling"
    source = row.get("source") or {}
    return Case(row["name"], spec, cluster, layout, role, float(row["images_per_s"]), source)


def load_cases(path: Path) -> tuple[list[Case], list[Skipped]]:
    """The evaluable rows of `path` and the others with their reasons, in file order."""
    data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    spec = load_model(data["model"])
    if spec.kind != "graph":
        raise SystemExit(f"{path}: model {data['model']!r} is not an op-graph model")
    cases: list[Case] = []
    skipped: list[Skipped] = []
    for row in data["rows"]:
        try:
            cases.append(case_from_row(row, spec))
        except NotEvaluableError as exc:
            skipped.append(Skipped(row["name"], str(exc)))
    return cases, skipped


# ---- evaluating -------------------------------------------------------------------------------


def evaluate(model: Evaluator, cases: Sequence[Case]) -> list[Row]:
    """Predicted images/s of every case (the graph cost model's `tokens_per_s` is samples/s)."""
    rows = []
    for case in cases:
        result = model.evaluate(case.spec, case.cluster, case.layout).estimate
        rows.append(Row(case, result.throughput.tokens_per_s, result.memory.fits))
    return rows


BREAKDOWN = (  # named formulas of graph.yaml, per step, seconds
    "graph_matmul_s",
    "graph_elementwise_s",
    "graph_launch_s",
    "graph_compute_s",
    "graph_dp_comm_s",  # before overlap
    "graph_dp_exposed_s",
    "graph_optimizer_s",
    "graph_step_s",
)


def format_breakdown(rules: RuleSet, cases: Sequence[Case]) -> str:
    """Each row's step time and its parts (ms): graph_compute_s = max(matmul + elementwise,
    launch); graph_dp_comm_s is before overlap, graph_dp_exposed_s after."""
    model = CostModel(rules, "graph")
    width = max([len(c.name) for c in cases] + [4])
    labels = [c.removeprefix("graph_").removesuffix("_s") for c in BREAKDOWN]
    lines = [f"{'row (ms)':<{width}} " + " ".join(f"{c:>11}" for c in labels)]
    for case in cases:
        env = model.layout_env(case.spec, case.cluster, case.layout)
        values = [named_value(rules, name, env) * 1e3 for name in BREAKDOWN]
        lines.append(f"{case.name:<{width}} " + " ".join(f"{v:11.2f}" for v in values))
    return "\n".join(lines) + "\n"


def format_report(report: Report) -> str:
    """The per-row table, the MAPE of each role and the rows not evaluated, as text."""
    width = max([len(r.case.name) for r in report.rows] + [4])
    head = (
        f"{'row':<{width}}  {'GPUs':>4} {'role':<7} {'predicted':>9} {'published':>9} "
        f"{'error':>7}  img/s"
    )
    lines = [head, "-" * len(head)]
    for row in report.rows:
        flag = "" if row.fits else "  (does not fit)"
        lines.append(
            f"{row.case.name:<{width}}  {row.case.layout.dp:>4} {row.case.role:<7} "
            f"{row.predicted:9.0f} {row.case.published:9.0f} {row.error_pct:+6.1f}%{flag}"
        )
    lines.append("-" * len(head))
    fitted, scaling = report.of("fit"), report.of("scaling")
    lines.append(
        f"MAPE over the {len(fitted)} fitted rows (1 GPU, mixed precision): "
        f"{report.mape('fit'):.1f} % (mean |ln error| {report.mean_abs_log_error('fit'):.4f})"
    )
    if scaling:
        lines.append(
            f"MAPE over the {len(scaling)} 8-GPU rows (not fitted): {report.mape('scaling'):.1f} %"
        )
        lines += _scaling_lines(report)
    if report.skipped:
        lines.append(f"\nnot evaluated ({len(report.skipped)}):")
        lines += [f"  {s.name}: {s.reason}" for s in report.skipped]
    return "\n".join(lines) + "\n"


def _scaling_lines(report: Report) -> list[str]:
    """Published vs modelled strong scaling of each multi-GPU row over its 1-GPU row."""
    single = {_table(r.case): r for r in report.of("fit")}
    lines = []
    for row in report.of("scaling"):
        base = single.get(_table(row.case))
        if base is None:
            continue
        published = row.case.published / base.case.published
        modelled = row.predicted / base.predicted
        lines.append(
            f"  {row.case.name}: strong scaling published {published:.2f}x, "
            f"modelled {modelled:.2f}x on {row.case.layout.dp} GPUs"
        )
    return lines


def _table(case: Case) -> tuple[str, str]:
    return str(case.source.get("table", "")), case.layout.precision


# ---- fitting ----------------------------------------------------------------------------------


def fit(cases: Sequence[Case], extra_rules: Sequence[str]) -> tuple[float, float]:
    """The value of FITTED (4 significant digits) that minimises the mean absolute log error of
    the "fit" rows, and that error."""
    fitted = [c for c in cases if c.role == "fit"]
    if not fitted:
        raise SystemExit("no single-GPU mixed-precision row to fit to")

    def objective(value: float) -> float:
        model = Evaluator(load_rules_with({FITTED: value}, extra_rules), "graph")
        return Report(evaluate(model, fitted)).mean_abs_log_error("fit")

    lo, hi = FIT_RANGE
    steps = round((hi - lo) / FIT_GRID_STEP)
    grid = [lo + i * FIT_GRID_STEP for i in range(steps + 1)]
    best = min(grid, key=objective)
    a, b = max(lo, best - FIT_GRID_STEP), min(hi, best + FIT_GRID_STEP)
    c, d = b - GOLDEN * (b - a), a + GOLDEN * (b - a)
    fc, fd = objective(c), objective(d)
    while b - a > FIT_TOLERANCE:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - GOLDEN * (b - a)
            fc = objective(c)
        else:
            a, c, fc = c, d, fd
            d = a + GOLDEN * (b - a)
            fd = objective(d)
    value = float(f"{(a + b) / 2:.4g}")
    return value, objective(value)


# ---- command line -----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None, out: Callable[[str], object] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--rules", action="append", default=[], metavar="DIR")
    parser.add_argument("--fit", action="store_true", help=f"fit {FITTED}")
    parser.add_argument("--breakdown", action="store_true", help="print each row's step parts")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        out(f"no published rows at {args.data} (give the path as an argument)")
        return 1
    cases, skipped = load_cases(args.data)
    rules = load_rules([builtin_rules_dir() / "cost", *args.rules], builtin=False)
    if args.fit:
        value, error = fit(cases, args.rules)
        out(f"fitted {FITTED} (rules/cost/graph.yaml): {value} (mean |ln error| {error:.4f})")
        rules = load_rules_with({FITTED: value}, args.rules)
    else:
        out(f"{FITTED}: {named_value(rules, FITTED, {})}")
    out(format_report(Report(evaluate(Evaluator(rules, "graph"), cases), skipped)))
    if args.breakdown:
        out(format_breakdown(rules, cases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
