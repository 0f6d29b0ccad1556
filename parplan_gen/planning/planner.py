"""The planner: search every (backend, layout) and rank what runs and fits.

The search space is the union of each backend's part (`planning/backends`: what it runs;
`rules/constraints/<backend>.yaml`: what it refuses): one `BackendPlanner` per backend asked
for, their results merged. Every candidate names the backend that runs it. Candidates rank by
the objective, then the other figure, then fewer parallel dimensions, then the backend order
of the model (`TrainedModel.backends`), so the result is deterministic.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import replace
from typing import NamedTuple

from parplan_gen.cost.estimate import Estimate
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.kind import BackendName, ModelKind
from parplan_gen.planning.backend_planner import BackendPlanner
from parplan_gen.planning.rejections import Rejection, merge
from parplan_gen.planning.search_result import SearchResult, ranking_key
from parplan_gen.planning.search_space import Objective, Request
from parplan_gen.planning.step_cutoff import StepCutoff
from parplan_gen.rules.ruleset import RuleSet

__all__ = ["BackendPlanner", "PlanError", "Planner", "SearchResult"]


class PlanError(InputError):
    """No layout of the request can exist at all (every candidate breaks an `invalid` rule).
    `lead`: the rule that refused the most layouts, with how many others refused some (None:
    the pins alone leave none)."""

    def __init__(self, message: str, lead: str | None = None) -> None:
        self.lead = lead
        super().__init__(message)


# The last searches' results, by rule set and request: a process that asks for one plan again
# (a notebook, `plan --days` and `frontier` trying counts a plan already tried, the API's
# users) gets the same result without searching again. A request is a frozen dataclass of
# frozen values (model, cluster, options), and a RuleSet never changes once loaded: the rule
# set is kept with its results, so its identity is never reused while they are.
_SEARCHED: OrderedDict[tuple[int, ModelKind, Request], tuple[RuleSet, SearchResult]] = OrderedDict()
SEARCHES_KEPT = 32


def forget_searches() -> None:
    """Empty the memo of searches (`_SEARCHED`): the next request is searched anew, as a
    benchmark timing the search needs."""
    _SEARCHED.clear()


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
        when no backend has a candidate at all. The same request on the same rules gives the
        result searched before (`_SEARCHED`)."""
        key = (id(self.rules), self.kind, request)
        kept = _SEARCHED.get(key)
        if kept is not None and kept[0] is self.rules:
            _SEARCHED.move_to_end(key)
            return kept[1]
        result = self._search(request)
        _SEARCHED[key] = (self.rules, result)
        while len(_SEARCHED) > SEARCHES_KEPT:
            _SEARCHED.popitem(last=False)
        return result

    def _search(self, request: Request) -> SearchResult:
        order, limits = request.options.backends, request.options.limits
        problem = limits.world_problem(request.cluster.num_gpus, request.global_batch)
        if problem:
            raise PlanError(f"no layout meets the pins: {problem}")
        found: list[SearchResult] = []
        # the steps of the plans found so far, on every backend: each backend's search skips
        # what they outrank (backend_planner.py, step_cutoff.py)
        steps = StepCutoff(request.top)
        for backend in order:
            part = replace(request, options=request.options.on(backend))
            found.append(self.on(backend).plan(part, steps))
        rejections = merge(part.rejections for part in found)
        feasible = any(part.feasible and part.candidates for part in found)
        pool = [
            _Ranked(candidate_rank(c, request.objective, feasible), _backend_order(c, order), c)
            for part in found
            if part.feasible == feasible
            for c in part.candidates
        ]
        bounded = list(dict.fromkeys(b for part in found for b in part.bounded))
        if not pool:
            counted = [f"{r.label} ({r.layouts})" for r in rejections]
            # the rules that bounded the search said too: they may leave nothing (--mbs 32)
            reasons = "; ".join([*counted, *bounded])
            world, name = request.cluster.num_gpus, request.spec.name
            lead = _lead(rejections)
            if limits.active:
                raise PlanError(pinned_out(limits.describe(), world, name, reasons, order), lead)
            raise PlanError(f"no layout of {world} GPUs can run {name}: {reasons}", lead)
        top = heapq.nsmallest(request.top, pool, key=lambda r: (r.rank, r.backend))
        best = top[0].estimate
        no_cp = (
            _best_without_cp(found, request.objective) if feasible and best.plan.cp > 1 else None
        )
        return SearchResult(
            candidates=[r.estimate for r in top],
            rejections=rejections,
            feasible=feasible,
            objective=request.objective,
            searched=sum(p.searched for p in found),
            evaluated=sum(p.evaluated for p in found),
            bounded=bounded,
            without_cp=no_cp,
        )


def _best_without_cp(found: list[SearchResult], objective: Objective) -> Estimate | None:
    """The best fitting candidate with cp 1 of the backends searched so far: among their
    candidates, and each one's `without_cp` (None: none has one)."""
    pool = [
        e
        for part in found
        if part.feasible
        for e in (*part.candidates, *([part.without_cp] if part.without_cp else []))
        if e.plan.cp == 1
    ]
    return min(pool, key=lambda e: candidate_rank(e, objective, True), default=None)


def _lead(rejections: list[Rejection]) -> str | None:
    """The rule that refused the most layouts (`merge` ranks them), and how many other rules
    refused some."""
    if not rejections:
        return None
    top = rejections[0]
    others = len(rejections) - 1
    return top.label + (f" (and {others} other rule{'s' * (others > 1)})" if others else "")


class _Ranked(NamedTuple):
    """A candidate of one backend's search among every backend's."""

    rank: tuple[float, ...]  # candidate_rank
    backend: int  # its backend's place in the model's order
    estimate: Estimate


def _backend_order(estimate: Estimate, order: tuple[str, ...]) -> int:
    """The place of the candidate's backend in the request's order (every candidate of a
    search names its backend)."""
    ref = estimate.backend
    if ref is None:
        raise ValueError(f"a candidate without a backend: {estimate.plan}")
    return order.index(ref.name)


def candidate_rank(estimate: Estimate, objective: Objective, feasible: bool) -> tuple[float, ...]:
    """The rank of a candidate among every backend's: a backend's own order when they fit,
    the least memory first when nothing fits."""
    if not feasible:
        return (estimate.memory.total,)
    figures = {"time_step_s": estimate.time.step_s, "memory_total": estimate.memory.total}
    return ranking_key(figures, estimate.plan, objective)


def pinned_out(pins: str, world: int, name: str, reasons: str, backends: tuple[str, ...]) -> str:
    """The one-line error for pins and bounds that no layout meets: the pins, then the rules
    that refuse every layout left (or that none is left at all)."""
    if reasons:
        return f"{pins}: no layout of {world} GPUs with these can run {name}: {reasons}"
    return (
        f"{pins}: no layout of {world} GPUs has these on {', '.join(backends)} (what each backend "
        "runs: docs/backends.md; interleaving needs pp > 1, sequence parallelism tp > 1)"
    )
