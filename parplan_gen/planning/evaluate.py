"""Evaluate one layout: the one path from (model, cluster, layout, rules) to an estimate and the
constraint verdicts on it.

layout -> formula environment (model.*, cluster.*, train.*, plan.*) -> the cost model's figures
-> every constraint rule (layout and estimate phases) -> `Evaluation`. Whether the layout fits
is the verdict of the memory rules (the estimate-phase constraints that read memory figures
only, `memory.fits` among the built-in ones), so an overlay that asks for more headroom changes
it everywhere at once. `check`, `estimate`, the API, the benchmarks and the planner's final
estimates all come through here; the planner's search reuses the same rule split
(`Evaluator.memory_rules`) for its fast subset of figures.

It lives in `planning` because it joins the cost model (`cost`) with the constraint rules
(`planning.constraints`), and `cost` may not import `planning`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from parplan_gen.cost.estimate import CostModel, Estimate, estimate_from_figures
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.layout import Layout
from parplan_gen.models.kind import ModelKind, TrainedModel
from parplan_gen.planning.constraints import Constraints, Violation, estimate_env, figures_read
from parplan_gen.rules.ruleset import CompiledConstraint, RuleSet

MEMORY_FIGURE_PREFIX = "memory_"


@dataclass(frozen=True)
class Evaluation:
    """One layout's estimate and every constraint it breaks, in rule order."""

    estimate: Estimate
    violations: tuple[Violation, ...]

    @property
    def fits(self) -> bool:
        """The memory rules hold (the estimate's `memory.fits`)."""
        return self.estimate.memory.fits

    @property
    def runnable(self) -> bool:
        """No `invalid` rule is broken."""
        return not any(v.severity == "invalid" for v in self.violations)


def is_memory_rule(constraint: CompiledConstraint) -> bool:
    """An estimate-phase rule that reads memory figures only: it decides whether a layout fits."""
    read = figures_read(constraint)
    return bool(read) and all(f.startswith(MEMORY_FIGURE_PREFIX) for f in read)


class Evaluator:
    """The cost model and the constraint rules of one RuleSet for one kind of model."""

    def __init__(self, rules: RuleSet, kind: ModelKind = "transformer") -> None:
        self.kind = kind
        self.cost = CostModel(rules, kind)
        self.constraints = Constraints(rules, kind)
        self.memory_rules = tuple(c for c in self.constraints.estimate if is_memory_rule(c))
        self._memory_ids = frozenset(c.rule.id for c in self.memory_rules)

    def fits(self, violations: Iterable[Violation]) -> bool:
        """Whether no memory rule is among `violations`."""
        return not any(v.rule_id in self._memory_ids for v in violations)

    def env(
        self, model: TrainedModel, cluster: Cluster, layout: Layout, *, flash_attention: bool
    ) -> dict[str, Any]:
        """Every name a cost or constraint formula may read for `layout`."""
        if model.kind != self.kind:
            raise ValueError(f"an evaluator for {self.kind} models got {model.name}")
        return self.cost.layout_env(model, cluster, layout, flash_attention=flash_attention)

    def evaluate(
        self, model: TrainedModel, cluster: Cluster, layout: Layout, *, flash_attention: bool = True
    ) -> Evaluation:
        """The estimate of `layout` and the rules it breaks."""
        env = self.env(model, cluster, layout, flash_attention=flash_attention)
        return self.evaluate_env(layout, env)

    def evaluate_env(self, layout: Layout, env: dict[str, Any]) -> Evaluation:
        """`evaluate` for an environment already built for `layout` (the planner's, reused
        between candidates); the estimate.* names are written into `env`."""
        figures = self.cost.figures(env)
        env.update(estimate_env(figures))
        violations = tuple(self.constraints.check(env))
        estimate = estimate_from_figures(layout, figures, fits=self.fits(violations))
        return Evaluation(estimate, violations)


def evaluate(
    model: TrainedModel,
    cluster: Cluster,
    layout: Layout,
    rules: RuleSet,
    *,
    flash_attention: bool = True,
) -> Evaluation:
    """The estimate of `layout` for `model` on `cluster` under `rules`, with its verdicts."""
    evaluator = Evaluator(rules, model.kind)
    return evaluator.evaluate(model, cluster, layout, flash_attention=flash_attention)
