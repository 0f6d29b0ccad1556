"""Fit the constants of benchmarks/fit_parameters.yaml, fast, and cross-validate the fit by
leaving one source out.

Fast: the rule files are parsed once; each case's formula environment is built once (it does
not depend on the constants); a trial recompiles only the named formulas the two throughput
figures read, with the trial's constants, and evaluates those two figures. The fit itself is
calibration.py's coordinate descent (same grid, sweeps and narrowing), so `--fit` gives the
same constants as before, in a fraction of the time.

Leave-one-source-out: for each publication with measured rows, fit on the measured rows of all
the others and predict its rows; a row's cross-validated error is the one from the fold that
left its publication out.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from calibration_read import PERCENT, Case

from parplan_gen.inputs.resources import builtin_rules_dir
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.rules.formulas import FormulaLibrary
from parplan_gen.rules.layers import Merged, merge_layer
from parplan_gen.rules.ruleset import RuleSet, load_rule_file, rule_files

FIGURES = {"model": "model_tflops_per_gpu", "hardware": "hardware_tflops_per_gpu"}
KIND = "transformer"
FIT_FILE = Path(__file__).resolve().parent / "fit_parameters.yaml"


def error_cap_pct(path: Path = FIT_FILE) -> float:
    """The |error| above which a row no longer steers the fit (fit_parameters.yaml
    `error_cap_pct`: a row that far off misses a term no constant should stand in for)."""
    from ruamel.yaml import YAML

    return float(YAML(typ="safe").load(path.read_text())["error_cap_pct"])


def merged_rules(extra_rules: Sequence[str] = ()) -> Merged:
    """rules/cost and `extra_rules`, parsed and merged once (load_rules' first half)."""
    merged = Merged()
    dirs = [builtin_rules_dir() / "cost", *map(Path, extra_rules)]
    for directory in dirs:
        merge_layer(merged, str(directory), [load_rule_file(p) for p in rule_files(directory)])
    return merged


def _names(value: object, named: Mapping[str, object]) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(str(value))) if isinstance(n, ast.Name)} & set(named)


class FastThroughput:
    """Predicted TFLOP/s of fixed cases under any values of the fit constants."""

    def __init__(self, rules: RuleSet, cases: Sequence[Case], extra_rules: Sequence[str] = ()):
        self.cases = list(cases)
        self._cap = error_cap_pct()
        merged = merged_rules(extra_rules)
        self._named = {n: (v, o.where) for n, (v, o) in merged.formulas.items()}
        self._figures = {
            metric: merged.estimate[(KIND, "throughput", key)] for metric, key in FIGURES.items()
        }
        needed: set[str] = set()
        todo = [str(v) for v, _ in self._figures.values()]
        while todo:
            for name in _names(todo.pop(), self._named) - needed:
                needed.add(name)
                todo.append(str(self._named[name][0]))
        self._needed = needed
        made: dict[Any, Evaluator] = {}
        self._envs = []
        for case in self.cases:
            if case.backend not in made:
                made[case.backend] = Evaluator(rules, backend=case.backend)
            env = made[case.backend].env(
                case.spec, case.cluster, case.layout, flash_attention=case.flash_attention
            )
            self._envs.append(case.with_facts(env))

    def predict(self, constants: Mapping[str, float]) -> list[float]:
        """Each case's predicted TFLOP/s per GPU (its metric) with `constants`."""
        named = {
            n: ((repr(constants[n]), w) if n in constants else (v, w))
            for n, (v, w) in self._named.items()
            if n in self._needed
        }
        library = FormulaLibrary(named)
        compiled = {
            metric: library.compile(value, origin.where, "estimate", "number", (KIND,))
            for metric, (value, origin) in self._figures.items()
        }
        return [
            compiled[c.metric].evaluate(env) for c, env in zip(self.cases, self._envs, strict=True)
        ]

    def mape(self, constants: Mapping[str, float], rows: Sequence[int] | None = None) -> float:
        """Mean absolute % error over `rows` (indexes of measured cases; None: all measured),
        each row's capped at error_cap_pct."""
        predicted = self.predict(constants)
        chosen = [i for i, c in enumerate(self.cases) if c.measured] if rows is None else rows
        cap = self._cap
        errors = [min(cap, abs(error_pct(predicted[i], self.cases[i]))) for i in chosen]
        return sum(errors) / max(1, len(errors))


def error_pct(predicted: float, case: Case) -> float:
    assert case.published_tflops is not None
    return (predicted / case.published_tflops - 1) * PERCENT


FitFunction = Callable[[Sequence[int]], dict[str, float]]  # measured row indexes -> constants


@dataclass(frozen=True)
class Fold:
    """One left-out publication: the constants fitted without it."""

    source: str
    held_out: tuple[int, ...]
    constants: dict[str, float]


def leave_one_source_out(cases: Sequence[Case], fit_on: FitFunction) -> list[Fold]:
    """For each publication with measured rows: the constants fitted on every other measured
    row (`fit_on` never sees a row of the publication it predicts)."""
    measured = [i for i, c in enumerate(cases) if c.measured]
    sources = sorted({cases[i].source for i in measured})
    folds = []
    for source in sources:
        held_out = tuple(i for i in measured if cases[i].source == source)
        training = [i for i in measured if cases[i].source != source]
        folds.append(Fold(source, held_out, fit_on(training)))
    return folds
