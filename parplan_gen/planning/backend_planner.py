"""The search over one backend's layouts: keep what its constraints allow and what fits, rank.

This module owns the search of one backend's part of the space (`planner.Planner` runs one
per backend and merges them) and its pruning, the ranking and the count of rejected candidates
by reason. The candidate space is `search_space`, constraints are rules (`constraints`),
figures come from the cost model (`estimate`); the planner adds no threshold of its own.
Advice for a request that nothing fits is `planning.advice.advise`.

The search goes structure (dp, tp, pp, cp, ep, etp) -> vpp -> mbs -> memory option. Each layout rule
is checked at the first level where every plan name it reads is known, so a broken rule rejects
a whole subtree at once (counted leaf by leaf). The cost model runs only for candidates that
pass, memory figures first and the step time only for those that fit. Three prunings rest on
stated properties of the cost model:

* memory grows with the micro-batch and with interleaving, and shrinks with more sharding
  (higher ZeRO stage or the distributed optimizer), recomputation and sequence parallelism: if
  the most frugal candidates of a (structure, vpp) do not fit, none does; once an option does
  not fit at some mbs, it does not fit at a larger one;
* recomputation never makes a fixed layout faster: with objective `time`, a recomputing variant
  of a layout that fits with less recomputation is counted as dominated.

Every candidate that is not ranked is counted under the first reason that removed it.
"""

from __future__ import annotations

import heapq
from collections import Counter, namedtuple
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from parplan_gen.cost.estimate import Estimate, Figures
from parplan_gen.cost.layout import PLAN_FIELDS, plan_values
from parplan_gen.inputs.errors import FormulaError, RuleError
from parplan_gen.models.kind import BackendName, ModelKind
from parplan_gen.planning.constraints import Violation, figures_read, first_violation, names_read
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.planning.search_space import (
    RECOMPUTE,
    MemoryOption,
    Objective,
    Request,
    Structure,
    layout_of,
    mbs_options,
    memory_options,
    structures,
    vpp_options,
)
from parplan_gen.rules.ruleset import CompiledConstraint, RuleSet

DOMINATED = "dominated: fits with less recomputation, which is never slower"
STRUCTURE, VIRTUAL, MICRO, MEMORY = range(4)  # search levels
# The plan.* names each level sets: a Structure, vpp, the micro-batch split, a MemoryOption.
STRUCTURE_NAMES, MEMORY_NAMES = (
    tuple(f"plan.{f}" for f in t._fields) for t in (Structure, MemoryOption)
)
LEVEL_OF: dict[str, int] = {
    **dict.fromkeys(STRUCTURE_NAMES, STRUCTURE),
    "plan.vpp": VIRTUAL,
    **dict.fromkeys(("plan.mbs", "plan.grad_accum"), MICRO),
    **dict.fromkeys(MEMORY_NAMES, MEMORY),
}
# One candidate of the search: the Layout's plan fields, in order (the rest is the request's).
_Candidate = namedtuple("_Candidate", PLAN_FIELDS)
# A candidate's leading fields, as the search fixes them: dp, tp, pp, cp, ep, etp, vpp[, mbs,
# accum].
_Prefix = tuple[int, ...]
_UNSEEN = object()


class SearchResult(BaseModel):
    """What one search found, before `api.plan` makes it a plan document: the best K estimates
    (the closest when nothing fits), the rejections by reason and how much was searched."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    candidates: list[Estimate]  # best first; empty only for one backend's part of a search
    rejected: dict[str, int]  # by reason, most first
    feasible: bool  # False: nothing fits; the candidates are the closest, least memory first
    objective: Objective
    searched: int  # candidates in the search space: ranked ones plus every rejected one
    evaluated: int  # candidates the cost model estimated

    @property
    def chosen(self) -> Estimate:
        """The best candidate."""
        return self.candidates[0]


class _Scored(NamedTuple):
    key: tuple[float, ...]
    order: int
    plan: _Candidate
    figures: dict[str, float]


def ranking_key(
    figures: Mapping[str, float], plan: Sequence[Any], objective: Objective
) -> tuple[float, ...]:
    """Objective first, then the other figure, then fewer parallel dimensions."""
    dp, tp, pp, cp, ep, _etp, vpp = plan[:7]
    dims = sum(size > 1 for size in (dp, tp, pp, cp, ep, vpp))  # etp is tensor parallelism
    time, memory = figures["time_step_s"], figures["memory_total"]
    return (time, memory, dims) if objective == "time" else (memory, time, dims)


# ---- figures and rules as the search uses them -----------------------------------------------


def _plan_names(constraint: CompiledConstraint) -> tuple[str, ...]:
    return tuple(sorted(n for n in names_read(constraint) if n.startswith("plan.")))


def _level(constraint: CompiledConstraint) -> int:
    plan_names = _plan_names(constraint)
    unknown = [n for n in plan_names if n not in LEVEL_OF]
    if unknown:
        raise RuleError(
            f"constraint '{constraint.rule.id}' reads {', '.join(unknown)}, which the planner "
            "does not set",
            constraint.origin.where,
        )
    return max((LEVEL_OF[n] for n in plan_names), default=STRUCTURE)


class BackendPlanner:
    """Plans for one RuleSet on one backend: its layout rules by search level, its estimate
    rules split into the memory rules that decide fitting (`evaluate.Evaluator.memory_rules`)
    and the others, and the cost model."""

    def __init__(
        self, rules: RuleSet, kind: ModelKind = "transformer", backend: BackendName = "megatron"
    ) -> None:
        self.rules, self.kind, self.backend = rules, kind, backend
        self.evaluator = Evaluator(rules, kind, backend)
        self.cost, self.constraints = self.evaluator.cost, self.evaluator.constraints
        levels: list[list[CompiledConstraint]] = [[] for _ in range(MEMORY + 1)]
        for constraint in self.constraints.layout:
            levels[_level(constraint)].append(constraint)
        self.levels = tuple(tuple(level) for level in levels)
        self.level_names = tuple(
            tuple(sorted({n for c in level for n in _plan_names(c)})) for level in levels
        )
        # Memory-level rules that do not read mbs/grad_accum have one outcome per option and vpp.
        self.memory_level_fixed = all(LEVEL_OF[n] != MICRO for n in self.level_names[MEMORY])
        estimate = self.constraints.estimate
        self.memory_rules = self.evaluator.memory_rules
        self.other_rules = tuple(c for c in estimate if c not in self.memory_rules)
        needed = set().union(*(figures_read(c) for c in estimate)) | {"time_step_s"}
        given = {f"{s}_{k}" for s, k in self.cost.formulas} | {"memory_total", "memory_capacity"}
        if needed - given:
            raise RuleError(
                f"no estimate figure {', '.join(sorted(needed - given))} "
                f"(the cost model gives {', '.join(sorted(given))})"
            )
        memory_needs = {n for c in self.memory_rules for n in figures_read(c)}
        self.memory_figures = Figures(self.cost, memory_needs, memory=True)
        self.time_figures = Figures(self.cost, needed - memory_needs, memory=False)

    def plan(self, request: Request) -> SearchResult:
        """Search the request's candidates on this backend and rank those that pass (module
        docstring); no candidate at all is an empty result. No advice: `planning.advice.advise` adds it."""
        if request.spec.kind != self.kind:
            raise ValueError(f"a planner for {self.kind} models got {request.spec.name}")
        if request.options.backend != self.backend:
            raise ValueError(f"a {self.backend} planner got options for {request.options.backend}")
        search = _Search(self, request)
        search.run()
        return search.result()


# ---- the search ------------------------------------------------------------------------------


class _Search:
    """One run: the environment it mutates, the counts, and the scored candidates."""

    def __init__(self, planner: BackendPlanner, request: Request) -> None:
        self.p, self.r = planner, request
        self.env: dict[str, object] = planner.cost.base_env(
            request.spec, request.cluster, global_batch=request.global_batch,
            seq_len=request.seq_len, precision=request.precision,
            flash_attention=request.flash_attention, memory_headroom=request.memory_headroom,
        )  # fmt: skip
        self.rejected: Counter[str] = Counter()
        self.fitting: list[_Scored] = []
        self.unfit: list[_Scored] = []  # broke a memory rule only: the closest candidates
        self.evaluated = self.searched = 0
        self._cache: dict[_Candidate, tuple[dict[str, float], Violation | None]] = {}
        self._memo: list[dict[tuple[Any, ...], object]] = [{} for _ in planner.levels]
        self._reasons: dict[tuple[Any, ...], str] = {}

    def run(self) -> None:
        """Visit every structure of the cluster's world size."""
        for head in structures(self.r.cluster.num_gpus, self.r.spec.is_moe, self.r.options):
            self._structure(head)

    def _first(self, level: int) -> Violation | None:
        """The first layout rule of `level` the candidate breaks, memoised on the plan names
        the level reads (within one search nothing else varies)."""
        env, memo = self.env, self._memo[level]
        key = tuple([env[n] for n in self.p.level_names[level]])
        found = memo.get(key, _UNSEEN)
        if found is _UNSEEN:
            found = memo[key] = first_violation(self.p.levels[level], env)
        return found  # type: ignore[return-value]

    def _structure(self, head: Structure) -> None:
        self.env.update(zip(STRUCTURE_NAMES, head, strict=True))
        vpps = vpp_options(self.r.layers, head.pp, self.r.options)
        mbss = mbs_options(self.r.global_batch, head.dp, self.r.options.limits)
        mems = memory_options(head.tp, self.r.options)
        self.searched += len(vpps) * len(mbss) * len(mems)
        found = self._first(STRUCTURE)
        if found is not None:
            self.rejected[found.reason] += len(vpps) * len(mbss) * len(mems)
            return
        self._cache.clear()
        self.env["plan.vpp"] = 1  # memory does not shrink with interleaving: a bound for all vpp
        # Its candidates are closest ones only where vpp 1 is in the space (not with --vpp 2).
        flat_kept = 1 in vpps and self._first(VIRTUAL) is None
        flat = self._memory_bound((*head, 1), mbss, mems, keep=flat_kept)
        for vpp in vpps:
            self.env["plan.vpp"] = vpp
            found = self._first(VIRTUAL)
            if found is not None:
                self.rejected[found.reason] += len(mbss) * len(mems)
                continue
            own = vpp > 1 and not (flat and flat_kept)  # the bound of this vpp's candidates
            bound = self._memory_bound((*head, vpp), mbss, mems) if own else flat
            self._virtual((*head, vpp), mbss, mems, bound)

    def _micro(self, dp: int, mbs: int) -> tuple[int, Violation | None]:
        accum = self.r.global_batch // (mbs * dp)
        self.env["plan.mbs"], self.env["plan.grad_accum"] = mbs, accum
        return accum, self._first(MICRO)

    def _set_memory(self, mem: MemoryOption) -> None:
        self.env.update(zip(MEMORY_NAMES, mem, strict=True))

    def _options(
        self, mems: list[MemoryOption], bound: Violation | None
    ) -> tuple[list[MemoryOption], Counter[str]]:
        """The options still open at this node, and the reasons that close the others."""
        live, dead = [], Counter[str]()
        for mem in mems:
            self._set_memory(mem)
            found = self._first(MEMORY) or bound
            if found is None:
                live.append(mem)
            else:
                dead[found.reason] += 1
        return live, dead

    def _virtual(
        self,
        head: _Prefix,
        mbss: list[int],
        mems: list[MemoryOption],
        bound: Violation | None,
    ) -> None:
        fixed = self._options(mems, bound) if self.p.memory_level_fixed else None
        failed: dict[MemoryOption, Violation] = {}  # options that did not fit at a smaller mbs
        for mbs in mbss:
            accum, found = self._micro(head[0], mbs)
            if found is not None:
                self.rejected[found.reason] += len(mems)
                continue
            live, dead = fixed or self._options(mems, bound)
            self.rejected.update(dead)
            fitted: set[tuple[Any, ...]] = set()  # (zero, dist, sp) that fit at this mbs
            for mem in live:
                self._leaf((*head, mbs, accum), mem, failed, fitted)

    def _leaf(
        self,
        head: _Prefix,
        mem: MemoryOption,
        failed: dict[MemoryOption, Violation],
        fitted: set[tuple[Any, ...]],
    ) -> None:
        """Estimate one candidate that passes every layout rule, unless it is pruned."""
        if mem in failed:
            self.rejected[failed[mem].reason] += 1
            return
        if self.r.objective == "time" and mem[:3] in fitted:
            self.rejected[DOMINATED] += 1
            return
        self._set_memory(mem)
        plan = _Candidate(*head, *mem)
        figures, found = self._assess(plan)
        if found is None:
            self._keep(self.fitting, plan, figures)
            fitted.add(mem[:3])
            return
        self.rejected[found.reason] += 1
        if "time_step_s" not in figures:  # broke a memory rule
            failed[mem] = found
            self._keep(self.unfit, plan, figures)

    def _assess(self, plan: _Candidate) -> tuple[dict[str, float], Violation | None]:
        """The candidate's figures and the first estimate rule it breaks; the time figures are
        computed only when the memory rules hold."""
        cached = self._cache.get(plan)
        if cached is not None:
            return cached
        self.evaluated += 1
        memo: dict[str, object] = {}  # the candidate's named formulas (see Evaluator.evaluate_env)
        figures = self.p.memory_figures(self.env, memo)
        found = self._check(self.p.memory_rules, figures, memo)
        if found is None:
            figures.update(self.p.time_figures(self.env, memo))
            found = self._check(self.p.other_rules, figures, memo)
        self._cache[plan] = figures, found
        return figures, found

    def _check(
        self,
        rules: tuple[CompiledConstraint, ...],
        figures: Mapping[str, float],
        memo: dict[str, object],
    ) -> Violation | None:
        env = self.env
        for name, value in figures.items():
            env["estimate." + name] = value
        for c in rules:
            try:
                if not c.when.evaluate(env, memo) or c.require.evaluate(env, memo):
                    continue
            except FormulaError as exc:
                raise FormulaError(f"constraint '{c.rule.id}': {exc.message}", exc.where) from None
            key = (c.rule.id, *[env[n] for n in sorted(c.reason.names)])
            if key not in self._reasons:
                self._reasons[key] = c.reason.render(env)
            return Violation(c.rule.id, c.rule.severity, self._reasons[key])
        return None

    def _keep(self, into: list[_Scored], plan: _Candidate, figures: dict[str, float]) -> None:
        key = (
            ranking_key(figures, plan, self.r.objective)
            if into is self.fitting
            else (figures["memory_total"],)
        )
        into.append(_Scored(key, len(into), plan, figures))

    def _memory_bound(
        self, head: _Prefix, mbss: list[int], mems: list[MemoryOption], keep: bool = True
    ) -> Violation | None:
        """The memory violation all candidates under `head` share, when even the most frugal
        (least mbs, full recompute, most sharding; `keep`: closest ones) break a memory rule."""
        for mbs in mbss:
            accum, found = self._micro(head[0], mbs)
            if found is None:
                break
        else:
            return None
        if not mems:
            return None
        most = max(RECOMPUTE.index(m.recompute) for m in mems)  # the most frugal left open
        most_sp = any(m.sequence_parallel for m in mems)
        frugal = [
            m
            for m in mems
            if RECOMPUTE.index(m.recompute) == most and m.sequence_parallel == most_sp
        ]
        allowed = [m for m in frugal if not (self._set_memory(m) or self._first(MEMORY))]
        zeros = [m for m in allowed if not m.distributed_optimizer]
        reps = [max(zeros, key=lambda m: m.zero_stage)] if zeros else []
        reps += [m for m in allowed if m.distributed_optimizer]
        broken: list[tuple[float, Violation, _Candidate]] = []
        for mem in reps:
            self._set_memory(mem)
            plan = _Candidate(*head, mbs, accum, *mem)
            figures, found = self._assess(plan)
            if "time_step_s" in figures:  # it fits memory: no bound
                return None
            broken.append((figures["memory_total"], found, plan))  # type: ignore[arg-type]
        for _, _, plan in broken if keep else ():
            self._keep(self.unfit, plan, self._cache[plan][0])
        return min(broken, key=lambda b: b[0])[1] if broken else None

    def result(self) -> SearchResult:
        """The ranked result; the closest candidates (least memory) when nothing fits."""
        top = heapq.nsmallest(self.r.top, self.fitting, key=lambda s: (s.key, s.order))
        feasible = bool(top)
        if not feasible:
            top = heapq.nsmallest(self.r.top, self.unfit, key=lambda s: (s.key, s.order))
        return SearchResult(
            candidates=[self.estimate(s.plan) for s in top],
            rejected=dict(self.rejected.most_common()), feasible=feasible,
            objective=self.r.objective, searched=self.searched, evaluated=self.evaluated,
        )  # fmt: skip

    def estimate(self, plan: _Candidate) -> Estimate:
        """The full, typed estimate of one candidate, evaluated as every layout is."""
        layout = layout_of(plan, self.r)
        self.env.update(plan_values(layout))
        return self.p.evaluator.evaluate_env(layout, self.env).estimate
