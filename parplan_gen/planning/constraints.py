"""Constraints: check a layout against the `constraints:` rules and say what it breaks.

This module owns evaluating compiled constraint rules (rules/constraints/) for an environment of
dotted names (model.*, cluster.*, train.*, plan.* and, after the cost model, estimate.*). It
knows nothing about how layouts are enumerated (planner) or estimated (estimate).

A constraint runs in one of two phases: `layout` constraints read no estimate figure and can be
checked before the cost model runs (cheaply, for every candidate); `estimate` constraints read
`estimate.<figure>` and are checked once the figures exist. A rule whose `when` is false does
not apply; one whose `require` is false is a Violation carrying the rule id, its severity and
its rendered reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from parplan_gen.inputs.errors import FormulaError
from parplan_gen.models.kind import BackendName, ModelKind
from parplan_gen.rules.ruleset import CompiledConstraint, RuleSet

Phase = Literal["layout", "estimate"]
Severity = Literal["invalid", "reject"]
ESTIMATE_PREFIX = "estimate."


@dataclass(frozen=True)
class Violation:
    """One broken constraint: which rule, how serious, and why (its rendered reason)."""

    rule_id: str
    severity: Severity
    reason: str

    def describe(self) -> str:
        """`reason [rule id, severity]`, the one-line form the CLI prints."""
        return f"{self.reason} [{self.rule_id}, {self.severity}]"


def names_read(constraint: CompiledConstraint) -> frozenset[str]:
    """Every dotted name the constraint's condition, requirement and reason read."""
    return constraint.when.names | constraint.require.names | constraint.reason.names


def phase_of(constraint: CompiledConstraint) -> Phase:
    """`estimate` when the constraint reads an estimate figure, else `layout`."""
    if any(n.startswith(ESTIMATE_PREFIX) for n in names_read(constraint)):
        return "estimate"
    return "layout"


def figures_read(constraint: CompiledConstraint) -> frozenset[str]:
    """The estimate figures (`memory_total`, ...) the constraint reads, without the prefix."""
    return frozenset(
        n[len(ESTIMATE_PREFIX) :] for n in names_read(constraint) if n.startswith(ESTIMATE_PREFIX)
    )


def estimate_env(figures: Mapping[str, float]) -> dict[str, float]:
    """`{"memory_total": x}` -> `{"estimate.memory_total": x}`: figures as constraint names."""
    return {ESTIMATE_PREFIX + key: value for key, value in figures.items()}


def violation(
    constraint: CompiledConstraint,
    env: Mapping[str, object],
    memo: dict[str, object] | None = None,
) -> Violation | None:
    """The Violation when `constraint` applies to `env` and is not met, else None (`memo`: the
    named formulas' values for `env`, see `Formula.evaluate`).

    A formula that fails while running (a missing name, a division by zero) is a FormulaError
    that names the rule.
    """
    rule = constraint.rule
    memo = {} if memo is None else memo
    try:
        if not constraint.when.evaluate(env, memo) or constraint.require.evaluate(env, memo):
            return None
        reason = constraint.reason.render(env)
    except FormulaError as exc:
        raise FormulaError(f"constraint '{rule.id}': {exc.message}", exc.where) from None
    return Violation(rule.id, rule.severity, reason)


def first_violation(
    constraints: Iterable[CompiledConstraint], env: Mapping[str, object]
) -> Violation | None:
    """The first constraint, in order, that `env` breaks; None when it meets them all. The
    named formulas they share are computed once (one memo for `env`)."""
    memo: dict[str, object] = {}
    for constraint in constraints:
        found = violation(constraint, env, memo)
        if found is not None:
            return found
    return None


def applies(constraint: CompiledConstraint, kind: ModelKind, backend: BackendName | None) -> bool:
    """Whether `constraint` judges plans of `kind` models on `backend` (None: the rules every
    backend shares only)."""
    scope = constraint.rule.backend
    return kind in constraint.model_kinds and (scope is None or scope == backend)


class Constraints:
    """The constraint rules of a RuleSet that apply to one kind of model on one backend, split
    by phase (rule file order is kept)."""

    def __init__(
        self, rules: RuleSet, kind: ModelKind = "transformer", backend: BackendName | None = None
    ) -> None:
        self.all = tuple(c for c in rules.constraints if applies(c, kind, backend))
        self.layout = tuple(c for c in self.all if phase_of(c) == "layout")
        self.estimate = tuple(c for c in self.all if phase_of(c) == "estimate")

    @property
    def figures(self) -> frozenset[str]:
        """Estimate figures that some constraint reads (the cost model must provide them)."""
        return frozenset().union(*(figures_read(c) for c in self.estimate))

    def check(
        self,
        env: Mapping[str, object],
        phase: Phase | None = None,
        memo: dict[str, object] | None = None,
    ) -> list[Violation]:
        """Every violation of `env`, in rule order; `phase` limits the check to one phase.
        `memo`: the named formulas' values for `env` (one for every rule: see `Formula.evaluate`).

        Checking the estimate phase needs the estimate.* names in `env` (see `estimate_env`).
        """
        chosen = {"layout": self.layout, "estimate": self.estimate, None: self.all}[phase]
        memo = {} if memo is None else memo
        found = (violation(c, env, memo) for c in chosen)
        return [v for v in found if v is not None]
