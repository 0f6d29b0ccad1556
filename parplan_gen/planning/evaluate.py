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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from parplan_gen.cost.estimate import (
    NO_HEADROOM,
    CostModel,
    Estimate,
    MemoryHeadroom,
    estimate_from_figures,
)
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.layout import Layout, plan_cross_entropy_fusion, plan_loss_compiled
from parplan_gen.inputs.defaults import GIB
from parplan_gen.inputs.errors import SourceRef
from parplan_gen.models.kind import BackendName, ModelKind, TrainedModel
from parplan_gen.planning.backends import BACKENDS
from parplan_gen.planning.constraints import Constraints, Violation, estimate_env, figures_read
from parplan_gen.rules.formula_runtime import Formula
from parplan_gen.rules.request_names import MEMORY_KEPT_FREE
from parplan_gen.rules.ruleset import CompiledConstraint, RuleSet

MEMORY_FIGURE_PREFIX = "memory_"
# The memory figures that more offloading raises (the host's pinned buffers): a rule reading one
# is no bound of the planner's search, whose most frugal option offloads the most.
HOST_MEMORY_FIGURES = frozenset({"memory_host_offload"})
CAPABILITY_RULE = "backend.capabilities"  # the rule id of a layout outside its backend's reach


@dataclass(frozen=True)
class Evaluation:
    """One layout's estimate and every constraint it breaks, in rule order."""

    estimate: Estimate
    violations: tuple[Violation, ...]
    # the host's memory rules among `violations` (Evaluator.gpu_memory_rules: the others)
    host_broken: tuple[Violation, ...] = field(default=(), kw_only=True)

    @property
    def fits(self) -> bool:
        """The memory rules hold (the estimate's `memory.fits`)."""
        return self.estimate.memory.fits

    @property
    def runnable(self) -> bool:
        """No `invalid` rule is broken."""
        return not any(v.severity == "invalid" for v in self.violations)

    def problem(self) -> str | None:
        """Why the layout does not run as given, in one line (None when it does): the first
        `invalid` rule it breaks (and how many more), else by how much it does not fit."""
        invalid = [v for v in self.violations if v.severity == "invalid"]
        if invalid:
            more = f" (and {len(invalid) - 1} more rule(s))" if len(invalid) > 1 else ""
            return f"the layout cannot run: {invalid[0].describe()}{more}"
        if self.fits:
            return None
        memory = self.estimate.memory
        if memory.total <= memory.capacity and self.host_broken:  # the host's memory does not
            return f"the layout does not fit: {self.host_broken[0].describe()}"
        # else another memory rule: the host's for offloaded activations (an estimate read back
        # without its verdicts, compare's columns) or an overlay's
        why = memory.shortfall() or "another memory rule breaks: the host's, or an overlay's"
        return (
            f"the layout does not fit: {memory.total / GIB:.1f} GiB per GPU, the GPU has "
            f"{memory.capacity / GIB:.1f} GiB ({why})"
        )


def is_memory_rule(constraint: CompiledConstraint) -> bool:
    """An estimate-phase rule that reads memory figures only: it decides whether a layout fits."""
    read = figures_read(constraint)
    return bool(read) and all(f.startswith(MEMORY_FIGURE_PREFIX) for f in read)


class Evaluator:
    """The cost model and the constraint rules of one RuleSet for one kind of model on one
    backend (None: only the rules every backend shares)."""

    def __init__(
        self, rules: RuleSet, kind: ModelKind = "transformer", backend: BackendName | None = None
    ) -> None:
        self.kind, self.backend = kind, backend
        self.cost = CostModel(rules, kind, backend)
        # the named formulas that pick the backend's release (Capabilities.later_when)
        later = BACKENDS[backend].later_when if backend is not None else ()
        self._later = {name: named_formula(rules, name) for name, _ in later}
        self.constraints = Constraints(rules, kind, backend)
        self.memory_rules = tuple(c for c in self.constraints.estimate if is_memory_rule(c))
        self.gpu_memory_rules = tuple(
            c for c in self.memory_rules if not figures_read(c) & HOST_MEMORY_FIGURES
        )
        # what the GPU's memory rules keep free, where one of them reads it (the built-in
        # memory.fits does; an overlay's own rule may not)
        kept = any(uses_named(rules, c.require, MEMORY_KEPT_FREE) for c in self.gpu_memory_rules)
        self._kept_free = named_formula(rules, MEMORY_KEPT_FREE, "constraint") if kept else None
        self._memory_ids = frozenset(c.rule.id for c in self.memory_rules)
        self._host_ids = self._memory_ids - {c.rule.id for c in self.gpu_memory_rules}

    def kept_free(self, env: Mapping[str, Any], memo: dict[str, object]) -> float:
        """What the memory rule keeps free for the layout of `env` (the named formula
        `memory_kept_free`, rules/constraints/headroom.yaml; 0 where no GPU memory rule reads
        it: the cost rules alone, or an overlay's rule of its own). `env` holds the estimate.*
        names."""
        if self._kept_free is None:
            return 0.0
        value = self._kept_free.evaluate(env, memo)
        return float(value)  # type: ignore[arg-type]

    def fits(self, violations: Iterable[Violation]) -> bool:
        """Whether no memory rule is among `violations`."""
        return not any(v.rule_id in self._memory_ids for v in violations)

    def env(
        self,
        model: TrainedModel,
        cluster: Cluster,
        layout: Layout,
        *,
        flash_attention: bool,
        memory_headroom: MemoryHeadroom = NO_HEADROOM,
    ) -> dict[str, Any]:
        """Every name a cost or constraint formula may read for `layout`."""
        if model.kind != self.kind:
            raise ValueError(f"an evaluator for {self.kind} models got {model.name}")
        return self.cost.layout_env(
            model, cluster, layout, flash_attention=flash_attention, memory_headroom=memory_headroom
        )

    def evaluate(
        self,
        model: TrainedModel,
        cluster: Cluster,
        layout: Layout,
        *,
        flash_attention: bool = True,
        memory_headroom: MemoryHeadroom = NO_HEADROOM,
    ) -> Evaluation:
        """The estimate of `layout` and the rules it breaks (`memory_headroom`: what the memory
        rules keep free per GPU). A layout that names no loss kernel, or leaves the loss's
        compile unsaid, is priced, and shown, as the backend's plans write it (cost/layout.py
        plan_cross_entropy_fusion, plan_loss_compiled)."""
        layout = self.as_plans_write(layout)
        env = self.env(
            model,
            cluster,
            layout,
            flash_attention=flash_attention,
            memory_headroom=memory_headroom,
        )
        return self.evaluate_env(layout, env)

    def as_plans_write(self, layout: Layout) -> Layout:
        """`layout` with what it leaves unsaid of the loss (its kernel, its compile) as the
        backend's plan files write it; an uncompiled loss is unsaid on a backend that never
        compiles it (None, as its plans say)."""
        update: dict[str, Any] = {}
        fusion = plan_cross_entropy_fusion(self.backend)
        if layout.cross_entropy_fusion is None and fusion is not None:
            update["cross_entropy_fusion"] = fusion
        compiled = plan_loss_compiled(self.backend)
        if layout.loss_compiled is None and compiled is not None:
            update["loss_compiled"] = compiled
        elif layout.loss_compiled is False and compiled is None:
            update["loss_compiled"] = None
        return layout.model_copy(update=update) if update else layout

    def evaluate_env(self, layout: Layout, env: dict[str, Any]) -> Evaluation:
        """`evaluate` for an environment already built for `layout` (the planner's, reused
        between candidates); the estimate.* names are written into `env`. The figures and the
        rules share one memo of named formulas: the estimate.* names it adds are read by no
        named formula that a figure uses (figures may not read estimate.*)."""
        memo: dict[str, object] = {}
        figures = self.cost.figures(env, memo)
        env.update(estimate_env(figures))
        refused = None if self.backend is None else BACKENDS[self.backend].refuses(layout)
        outside = () if refused is None else (Violation(CAPABILITY_RULE, "invalid", refused),)
        violations = (*outside, *self.constraints.check(env, memo=memo))
        ref = None
        if self.backend is not None:

            def holds(name: str) -> bool:  # computed by the figures already, or now
                return bool(memo[name] if name in memo else self._later[name].evaluate(env, memo))

            ref = BACKENDS[self.backend].ref_for(layout, holds)
        estimate = estimate_from_figures(
            layout,
            figures,
            fits=self.fits(violations),
            backend=ref,
            kept_free=self.kept_free(env, memo),
        )
        host_broken = tuple(v for v in violations if v.rule_id in self._host_ids)
        return Evaluation(estimate, violations, host_broken=host_broken)


def uses_named(rules: RuleSet, formula: Formula, name: str) -> bool:
    """Whether `formula` uses the named formula `name`, directly or through others."""
    seen: set[str] = set()
    todo = list(formula.refers)
    while todo:
        used = todo.pop()
        if used == name:
            return True
        if used not in seen:
            seen.add(used)
            todo.extend(rules.library.refers(used))
    return False


def named_formula(rules: RuleSet, name: str, context: str = "estimate") -> Formula:
    """The named formula `name` of `rules`, compiled to be evaluated on its own in `context`
    (`constraint`: one that reads estimate.* figures)."""
    return rules.library.compile(name, SourceRef(f"named formula {name}"), context)


def evaluate(
    model: TrainedModel,
    cluster: Cluster,
    layout: Layout,
    rules: RuleSet,
    *,
    flash_attention: bool = True,
    backend: BackendName | None = None,
    memory_headroom: MemoryHeadroom = NO_HEADROOM,
) -> Evaluation:
    """The estimate of `layout` for `model` on `cluster` under `rules`, with its verdicts, on
    `backend`; None: on the first of the model's backends that runs it (no `invalid` rule of
    its own broken), else on the one it breaks the fewest `invalid` rules of. A backend whose
    sharding of `layout` is its own (Megatron-FSDP's ZeRO-2/3) comes after the others.
    `memory_headroom`: what the memory rules keep free (a plan's; none by default)."""
    last = {n: BACKENDS[n].priced_apart(layout) for n in model.backends}
    names = sorted(model.backends, key=last.__getitem__) if backend is None else (backend,)
    found: list[Evaluation] = []
    for name in names:
        evaluator = Evaluator(rules, model.kind, name)
        found.append(
            evaluator.evaluate(
                model,
                cluster,
                layout,
                flash_attention=flash_attention,
                memory_headroom=memory_headroom,
            )
        )
        if found[-1].runnable:
            return found[-1]
    return min(found, key=lambda e: sum(v.severity == "invalid" for v in e.violations))


def backend_verdicts(
    model: TrainedModel,
    cluster: Cluster,
    layout: Layout,
    rules: RuleSet,
    priced_on: BackendName | None = None,
) -> dict[str, str | None]:
    """For each of the model's backends: None when it runs `layout` (it is within the backend's
    capabilities and breaks none of its `invalid` rules) as the plan, priced on `priced_on`
    (None: on none), was priced, else why not. A backend the plan was not priced on is judged
    on the layout less its loss kernel (Layout.cross_entropy_fusion), which is Megatron-LM's,
    and its loss's compile (Layout.loss_compiled), which is torchtitan's: the others compute
    their framework's own loss."""
    env: dict[str, Any] | None = None
    out: dict[str, str | None] = {}
    for name in model.backends:
        caps = BACKENDS[name]
        judged = (
            layout
            if name == priced_on
            else layout.model_copy(update={"cross_entropy_fusion": None, "loss_compiled": None})
        )
        why = caps.refuses(judged)
        if why is None and priced_on != name and caps.priced_apart(layout):
            why = (
                f"its ZeRO-{layout.zero_stage} is a sharding of its own, priced apart: plan "
                f"with --backend {name}"
            )
        if why is None:
            constraints = Constraints(rules, model.kind, name)
            if env is None:
                env = Evaluator(rules, model.kind).env(model, cluster, layout, flash_attention=True)
            broken = [v for v in constraints.check(env, "layout") if v.severity == "invalid"]
            why = broken[0].reason if broken else None
        out[name] = why
    return out
