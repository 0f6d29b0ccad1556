"""Plan every published calibration run and compare the plan with the layout that was run.

Each evaluable entry of `published_runs.yaml` (`calibration.load_cases` builds its ModelSpec,
Cluster and Layout) is estimated with our cost model as published, then `parplan_gen.plan` runs
at the same model, cluster (GPUs, GPU type, network), global batch, sequence length, precision
and attention kernel. The table shows both layouts and step times, the speed-up of the plan
(published step time / planned step time), how long `plan` took, and whether the published
layout was admissible: the constraint rules it breaks, if any, and why the search would not
visit it otherwise. Issue "parplan plan", Done when: the plan is at least as fast as the
published layout by our own model (a speed-up below 1 is a planner bug; the script then exits
1) and the speed targets hold (the 405B command and `--help`, timed as `plan_speed.py` does).

    python benchmarks/plan_vs_published.py [RUNS.yaml] [--rules DIR] [--repeat N]
                                           [--markdown] [--no-speed]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from calibration import DEFAULT_RUNS, Case, load_cases
from plan_speed import COMMAND, best_of, time_command

from parplan_gen.api import Plan, plan
from parplan_gen.cost.estimate import Estimate
from parplan_gen.cost.layout import Layout
from parplan_gen.planning.constraints import Violation
from parplan_gen.planning.evaluate import evaluate
from parplan_gen.planning.planner import PlanError
from parplan_gen.planning.search_space import Request, SearchOptions, outside_search
from parplan_gen.rules.ruleset import RuleSet, load_rules

# Ties are exact in the model, but the two layouts reach them through different arithmetic.
RATIO_TOLERANCE = 1e-9
MS = 1e3
RECOMPUTE_SHORT = {"none": "", "selective": "sel", "full": "full"}
# Issue "parplan plan", item 6: the whole 405B command <= 1 s wall, `parplan --help` <= 0.3 s.
COMMAND_TARGET_S = 1.0
HELP_TARGET_S = 0.3
HEADERS = (
    "run",
    "published layout",
    "est. step s",
    "planned layout",
    "step s",
    "speed-up",
    "plan ms",
    "published layout admissible?",
)
RIGHT_COLUMNS = {2, 4, 5, 6}


@dataclass(frozen=True)
class Comparison:
    """One published run: its layout as estimated, and what the planner chose instead."""

    name: str
    published: Estimate
    violations: tuple[Violation, ...]  # every rule the published layout breaks
    outside: str | None  # why the search never visits the published layout (None: it does)
    chosen: Estimate | None  # None: `plan` found no layout at all (`failure` says why)
    feasible: bool  # the chosen layout fits
    plan_s: float  # best wall time of the `plan` call, rules loaded
    failure: str = ""

    @property
    def speedup(self) -> float:
        """Published step time over planned step time (0 when nothing was planned)."""
        if self.chosen is None:
            return 0.0
        return self.published.time.step_s / self.chosen.time.step_s

    @property
    def planner_wins(self) -> bool:
        """The plan fits and is at least as fast as the published layout, by our model."""
        return self.feasible and self.speedup >= 1 - RATIO_TOLERANCE

    @property
    def admissible(self) -> str:
        """Whether the planner could have chosen the published layout, and if not, why."""
        if self.violations:
            return "no: " + "; ".join(v.describe() for v in self.violations)
        if self.outside:
            return f"passes every rule, not searched: {self.outside}"
        return "yes"


def short_layout(layout: Layout) -> str:
    """`tp8 pp8 dp24 vpp2 mbs2 full` and the memory options that are on."""
    parts = [f"tp{layout.tp}", f"pp{layout.pp}", f"dp{layout.dp}"]
    parts += [
        f"{k}{v}" for k, v in (("cp", layout.cp), ("ep", layout.ep), ("vpp", layout.vpp)) if v > 1
    ]
    parts.append(f"mbs{layout.mbs}")
    if layout.sequence_parallel:
        parts.append("SP")
    if layout.zero_stage:
        parts.append(f"ZeRO-{layout.zero_stage}")
    if layout.distributed_optimizer:
        parts.append("dist-opt")
    if RECOMPUTE_SHORT[layout.recompute]:
        parts.append(RECOMPUTE_SHORT[layout.recompute])
    return " ".join(parts)


def estimate_published(rules: RuleSet, case: Case) -> tuple[Estimate, tuple[Violation, ...]]:
    """The published layout's estimate and every rule it breaks (what `parplan check` lists)."""
    found = evaluate(
        case.spec, case.cluster, case.layout, rules, flash_attention=case.flash_attention
    )
    return found.estimate, found.violations


def compare(case: Case, rules: RuleSet, repeat: int = 1) -> Comparison:
    """Estimate the published layout, then plan the same request (timed, best of `repeat`)."""
    published, violations = estimate_published(rules, case)
    layout = case.layout

    # A run that offloaded activations or reduced bf16 gradients is planned with them searched
    # (off by default, as in Megatron-LM: rules/search/defaults.yaml), so that its layout is in
    # the search: the request asks for what the run used.
    search: dict[str, str] = {}
    if layout.offload_layers:
        search["activation_offload"] = "search"
    if layout.grad_reduce_dtype != "default":
        search["grad_reduce_dtype"] = layout.grad_reduce_dtype

    def planned() -> Plan:
        # headroom 0: the published layout is judged against the whole GPU, so is the plan
        return plan(
            case.spec, case.cluster, global_batch=layout.global_batch, seq_len=layout.seq_len,
            precision=layout.precision, flash_attention=case.flash_attention, rules=rules,
            headroom=0, search=search,
        )  # fmt: skip

    try:
        wall, _, result = best_of(repeat, planned)
    except PlanError as exc:
        return Comparison(case.name, published, violations, None, None, False, 0.0, str(exc))
    # The search over the backend the published layout was judged on (the first that runs it).
    options = SearchOptions.for_model(case.spec, result.document.search.options())  # type: ignore[union-attr,arg-type]
    backend = published.backend.name if published.backend else options.backends[0]
    request = Request(
        case.spec, case.cluster, layout.global_batch, layout.seq_len, layout.precision,
        flash_attention=case.flash_attention, options=options.on(backend),
    )  # fmt: skip
    return Comparison(
        case.name, published, violations, outside_search(layout, request),
        result.chosen, result.feasible, wall,
    )  # fmt: skip


# ---- report ------------------------------------------------------------------------------------


def rows(comparisons: Sequence[Comparison]) -> list[list[str]]:
    """The table's cells, one row per run."""
    out = []
    for c in comparisons:
        chosen = c.chosen
        planned = "no plan: " + c.failure if chosen is None else short_layout(chosen.plan)
        if chosen is not None and not c.feasible:
            planned += " (does not fit)"
        out.append([
            c.name,
            short_layout(c.published.plan),
            f"{c.published.time.step_s:.3f}",
            planned,
            "-" if chosen is None else f"{chosen.time.step_s:.3f}",
            f"{c.speedup:.3f}",
            f"{c.plan_s * MS:.0f}",
            c.admissible,
        ])  # fmt: skip
    return out


def text_table(comparisons: Sequence[Comparison]) -> str:
    """The table as aligned text."""
    from parplan_gen.cli.textview import table

    return table(HEADERS, rows(comparisons), right=RIGHT_COLUMNS)


def markdown_table(comparisons: Sequence[Comparison]) -> str:
    """The table as Markdown (docs/benchmarks.md)."""
    align = ["---:" if i in RIGHT_COLUMNS else "---" for i in range(len(HEADERS))]
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "|".join(align) + "|"]
    for row in rows(comparisons):
        cells = [f"`{cell}`" if i in (1, 3) else cell for i, cell in enumerate(row)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def summary(comparisons: Sequence[Comparison]) -> str:
    """Wins, the spread of the speed-ups, the admissibility counts and the planning times."""
    n = len(comparisons)
    wins = [c for c in comparisons if c.planner_wins]
    speedups = [c.speedup for c in comparisons]
    lines = [
        f"planner at least as fast as the published layout, by our model: {len(wins)} of {n} "
        f"runs (speed-up min {min(speedups):.3f}, median {statistics.median(speedups):.3f}, "
        f"max {max(speedups):.3f})"
    ]
    lines += [
        f"  LOSES: {c.name} ({c.speedup:.3f}{', ' + c.failure if c.failure else ''})"
        for c in comparisons
        if c not in wins
    ]
    admissible = sum(not c.violations and not c.outside for c in comparisons)
    lines.append(f"published layout admissible and searched: {admissible} of {n}")
    broken = Counter(v.rule_id for c in comparisons for v in c.violations)
    lines += [f"  rejected by {rule}: {count} run(s)" for rule, count in broken.most_common()]
    outside = Counter(c.outside for c in comparisons if c.outside and not c.violations)
    lines += [f"  not searched ({count} run(s)): {why}" for why, count in outside.most_common()]
    times = [c.plan_s for c in comparisons]
    slowest = max(comparisons, key=lambda c: c.plan_s)
    lines.append(
        f"plan() with the rules loaded: {sum(times):.2f} s for {n} runs, median "
        f"{statistics.median(times) * MS:.0f} ms, slowest {slowest.plan_s * MS:.0f} ms "
        f"({slowest.name})"
    )
    return "\n".join(lines) + "\n"


def speed_lines(repeat: int) -> tuple[str, bool]:
    """The speed targets, each timed in fresh processes (best of `repeat`), and whether they
    hold."""
    lines, ok = [], True
    for label, args, target in (
        (f"parplan {' '.join(COMMAND)}", COMMAND, COMMAND_TARGET_S),
        ("parplan --help", ["--help"], HELP_TARGET_S),
    ):
        run = time_command(args, repeat)
        held = run.returncode == 0 and run.best_s <= target
        ok &= held
        verdict = "holds" if held else f"MISSED (exit {run.returncode}) {run.stderr[:200]}"
        lines.append(
            f"`{label}`: best of {repeat} {run.best_s:.2f} s (worst {run.worst_s:.2f} s), "
            f"target <= {target} s: {verdict}"
        )
    return "\n".join(lines) + "\n", ok


def main(argv: Sequence[str] | None = None, out: Callable[[str], object] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="?", type=Path, default=DEFAULT_RUNS)
    parser.add_argument("--rules", action="append", default=[], metavar="DIR")
    parser.add_argument("--repeat", type=int, default=3, help="timings: best of N")
    parser.add_argument("--markdown", action="store_true", help="the table as Markdown")
    parser.add_argument("--no-speed", action="store_true", help="skip the whole-command timings")
    args = parser.parse_args(argv)
    if not args.runs.is_file():
        out(f"no published runs at {args.runs} (give the path as an argument)")
        return 1
    cases, skipped = load_cases(args.runs)
    rules = load_rules(args.rules)
    comparisons = [compare(case, rules, args.repeat) for case in cases]
    out((markdown_table if args.markdown else text_table)(comparisons))
    out(summary(comparisons))
    if skipped:
        out(
            f"not evaluated ({len(skipped)}): "
            + "; ".join(f"{s.name}: {s.reason}" for s in skipped)
        )
    ok = all(c.planner_wins for c in comparisons)
    if not args.no_speed:
        text, fast = speed_lines(args.repeat)
        out(text)
        ok &= fast
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
