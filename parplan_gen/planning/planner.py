"""The planner: search every (backend, layout) and rank what runs and fits.

The search space is the union of each backend's part (`planning/backends`: what it runs;
`rules/constraints/<backend>.yaml`: what it refuses): one `BackendPlanner` per backend asked
for, their results merged. Every candidate names the backend that runs it. Candidates rank by
the objective, then the other figure, then fewer parallel dimensions, then the backend order
of the model (`TrainedModel.backends`), so the result is deterministic.
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import replace

from parplan_gen.cost.estimate import Estimate
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.kind import BackendName, ModelKind
from parplan_gen.planning.backend_planner import BackendPlanner, SearchResult, ranking_key
from parplan_gen.planning.search_space import Objective, Request
from parplan_gen.rules.ruleset import RuleSet

__all__ = ["BackendPlanner", "PlanError", "Planner", "SearchResult"]


class PlanError(InputError):
    """No layout of the request can exist at all (every candidate breaks an `invalid` rule)."""


class Planner:
    """Plans for one RuleSet and one kind of model, on every backend a request asks for."""

    def __init__(self, rules: RuleSet, kind: ModelKind = "transformer") -> None:
        self.rules, self.kind = rules, kind
        self._parts: dict[BackendName, BackendPlanner] = {}

    def on(self, backend: BackendName) -> BackendPlanner:
        """The planner of `backend`'s part of the space (built once)."""
        if backend not in self._parts:
            self._parts[backend] = BackendPlanner(self.rules, self.kind, backend)
        return self._parts[backend]

    def plan(self, request: Request) -> SearchResult:
        """Search each backend of the request, merge, and rank (module docstring); a PlanError
        when no backend has a candidate at all."""
        order, limits = request.options.backends, request.options.limits
        problem = limits.world_problem(request.cluster.num_gpus, request.global_batch)
        if problem:
            raise PlanError(f"no layout meets the pins: {problem}")
        found = [self.on(b).plan(replace(request, options=request.options.on(b))) for b in order]
        rejected: Counter[str] = Counter()
        for part in found:
            rejected.update(part.rejected)
        feasible = any(part.feasible and part.candidates for part in found)
        pool = [
            (candidate_rank(c, request.objective, feasible), order.index(c.backend.name), c)  # type: ignore[union-attr]
            for part in found
            if part.feasible == feasible
            for c in part.candidates
        ]
        if not pool:
            reasons = "; ".join(f"{r} ({n})" for r, n in rejected.most_common())
            world, name = request.cluster.num_gpus, request.spec.name
            if limits.active:
                raise PlanError(pinned_out(limits.describe(), world, name, reasons, order))
            raise PlanError(f"no layout of {world} GPUs can run {name}: {reasons}")
        top = heapq.nsmallest(request.top, pool, key=lambda t: t[:2])
        return SearchResult(
            candidates=[c for _, _, c in top], rejected=dict(rejected.most_common()),
            feasible=feasible, objective=request.objective,
            searched=sum(p.searched for p in found), evaluated=sum(p.evaluated for p in found),
        )  # fmt: skip


def candidate_rank(estimate: Estimate, objective: Objective, feasible: bool) -> tuple[float, ...]:
    """The rank of a candidate among every backend's: a backend's own order when they fit,
    the least memory first when nothing fits."""
    if not feasible:
        return (estimate.memory.total,)
    figures = {"time_step_s": estimate.time.step_s, "memory_total": estimate.memory.total}
    plan = estimate.plan
    sizes = (plan.dp, plan.tp, plan.pp, plan.cp, plan.ep, plan.etp, plan.vpp)
    return ranking_key(figures, sizes, objective)


def pinned_out(pins: str, world: int, name: str, reasons: str, backends: tuple[str, ...]) -> str:
    """The one-line error for pins and bounds that no layout meets: the pins, then the rules
    that refuse every layout left (or that none is left at all)."""
    if reasons:
        return f"{pins}: no layout of {world} GPUs with these can run {name}: {reasons}"
    return (
        f"{pins}: no layout of {world} GPUs has these on {', '.join(backends)} (what each backend "
        "runs: docs/backends.md; interleaving needs pp > 1, sequence parallelism tp > 1)"
    )
