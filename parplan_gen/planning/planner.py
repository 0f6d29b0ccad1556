"""The planner: search every layout, keep what the constraints allow and what fits, rank.

This module owns the search and its pruning, the ranking and the count of rejected candidates
by reason. The candidate space is `search_space`, constraints are rules (`constraints`),
figures come from the cost model (`estimate`); the planner adds no threshold of its own.
Advice for a request that nothing fits is `api.advise`.

The search goes structure (dp, tp, pp, cp, ep) -> vpp -> mbs -> memory option. Each layout rule
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
from collections import Counter
from collections.abc import Mapping
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from parplan_gen.cost.estimate import Estimate, Figures
from parplan_gen.inputs.errors import FormulaError, InputError, RuleError
from parplan_gen.models.kind import ModelKind
from parplan_gen.planning.constraints import Violation, figures_read, first_violation, names_read
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.planning.search_space import (
    MemoryOption,
    Objective,
    Request,
    layout_of,
    mbs_options,
    memory_options,
    structures,
    vpp_options,
)
from parplan_gen.rules.ruleset import CompiledConstraint, RuleSet

DOMINATED = "dominated: fits with less recomputation, which is never slower"
STRUCTURE, VIRTUAL, MICRO, MEMORY = range(4)  # search levels
LEVEL_OF: dict[str, int] = {
    **dict.fromkeys(("plan.dp", "plan.tp", "plan.pp", "plan.cp", "plan.ep"), STRUCTURE),
    "plan.vpp": VIRTUAL,
    **dict.fromkeys(("plan.mbs", "plan.grad_accum"), MICRO),
    **dict.fromkeys(
        (
            "plan.zero_stage",
            "plan.distributed_optimizer",
            "plan.sequence_parallel",
            "plan.recompute",
        ),
        MEMORY,
    ),
}
_UNSEEN = object()


class PlanError(InputError):
    """No layout of the request can exist at all (every candidate breaks an `invalid` rule)."""


class Advice(BaseModel):
    """What would make an infeasible request fit, measured by re-estimating one change."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    change: str
    fits: bool
    memory_total: int | None  # bytes per GPU after the change; None when it cannot run
    note: str


class PlanResult(BaseModel):
    """The chosen layout, the best K, what was rejected and why, and advice when nothing fits."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    chosen: Estimate
    candidates: list[Estimate]
    rejected: dict[str, int]
    advice: list[Advice]
    feasible: bool  # False: nothing fits; `chosen` is the closest candidate
    objective: Objective
    searched: int  # candidates in the search space: ranked ones plus every rejected one
    evaluated: int  # candidates the cost model estimated

    def contract(self) -> dict[str, Any]:
        """The DESIGN.md JSON: `{"chosen": ..., "candidates": [...], "rejected": {...}}`."""
        return {
            "chosen": self.chosen.contract(),
            "candidates": [c.contract() for c in self.candidates],
            "rejected": dict(self.rejected),
        }


class _Scored(NamedTuple):
    key: tuple[float, ...]
    order: int
    plan: tuple[Any, ...]  # values in PLAN_FIELDS order
    figures: dict[str, float]


def ranking_key(
    figures: Mapping[str, float], plan: tuple[Any, ...], objective: Objective
) -> tuple[float, ...]:
    """Objective first, then the other figure, then fewer parallel dimensions."""
    dims = sum(size > 1 for size in plan[:6])  # dp, tp, pp, cp, ep, vpp
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


class Planner:
    """Plans for one RuleSet: its layout rules by search level, its estimate rules split into
    the memory rules that decide fitting (`evaluate.Evaluator.memory_rules`) and the others,
    and the cost model."""

    def __init__(self, rules: RuleSet, kind: ModelKind = "transformer") -> None:
        self.rules, self.kind = rules, kind
        self.evaluator = Evaluator(rules, kind)
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

    def plan(self, request: Request) -> PlanResult:
        """Search the request's candidates and rank those that pass (module docstring).

        The result has no advice; `api.advise` adds it when nothing fits.
        """
        if request.spec.kind != self.kind:
            raise ValueError(f"a planner for {self.kind} models got {request.spec.name}")
        search = _Search(self, request)
        search.run()
        return search.result()


# ---- the search ------------------------------------------------------------------------------


class _Search:
    """One run: the environment it mutates, the counts, and the scored candidates."""

    def __init__(self, planner: Planner, request: Request) -> None:
        self.p, self.r = planner, request
        self.env: dict[str, object] = planner.cost.base_env(
            request.spec, request.cluster, global_batch=request.global_batch,
            seq_len=request.seq_len, precision=request.precision,
            flash_attention=request.flash_attention,
        )  # fmt: skip
        self.rejected: Counter[str] = Counter()
        self.fitting: list[_Scored] = []
        self.unfit: list[_Scored] = []  # broke a memory rule only: the closest candidates
        self.evaluated = self.searched = 0
        self._cache: dict[tuple[Any, ...], tuple[dict[str, float], Violation | None]] = {}
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

    def _structure(self, head: tuple[int, int, int, int, int]) -> None:
        dp, tp, pp, cp, ep = head
        self.env.update({"plan.dp": dp, "plan.tp": tp, "plan.pp": pp, "plan.cp": cp, "plan.ep": ep})
        vpps = vpp_options(self.r.layers, pp, self.r.options)
        mbss = mbs_options(self.r.global_batch, dp)
        mems = memory_options(tp, self.r.options)
        self.searched += len(vpps) * len(mbss) * len(mems)
        found = self._first(STRUCTURE)
        if found is not None:
            self.rejected[found.reason] += len(vpps) * len(mbss) * len(mems)
            return
        self._cache.clear()
        self.env["plan.vpp"] = 1  # memory does not shrink with interleaving: a bound for all vpp
        flat = self._memory_bound((*head, 1), mbss, mems)
        for vpp in vpps:
            self.env["plan.vpp"] = vpp
            found = self._first(VIRTUAL)
            if found is not None:
                self.rejected[found.reason] += len(mbss) * len(mems)
                continue
            bound = flat or (self._memory_bound((*head, vpp), mbss, mems) if vpp > 1 else None)
            self._virtual((*head, vpp), mbss, mems, bound)

    def _micro(self, dp: int, mbs: int) -> tuple[int, Violation | None]:
        accum = self.r.global_batch // (mbs * dp)
        self.env["plan.mbs"], self.env["plan.grad_accum"] = mbs, accum
        return accum, self._first(MICRO)

    def _set_memory(self, mem: MemoryOption) -> None:
        env = self.env
        env["plan.zero_stage"], env["plan.distributed_optimizer"] = mem[0], mem[1]
        env["plan.sequence_parallel"], env["plan.recompute"] = mem[2], mem[3]

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
        head: tuple[int, ...],
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
        head: tuple[Any, ...],
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
        plan = (*head, *mem)
        figures, found = self._assess(plan)
        if found is None:
            self._keep(self.fitting, plan, figures)
            fitted.add(mem[:3])
            return
        self.rejected[found.reason] += 1
        if "time_step_s" not in figures:  # broke a memory rule
            failed[mem] = found
            self._keep(self.unfit, plan, figures)

    def _assess(self, plan: tuple[Any, ...]) -> tuple[dict[str, float], Violation | None]:
        """The candidate's figures and the first estimate rule it breaks; the time figures are
        computed only when the memory rules hold."""
        cached = self._cache.get(plan)
        if cached is not None:
            return cached
        self.evaluated += 1
        figures = self.p.memory_figures(self.env)
        found = self._check(self.p.memory_rules, figures)
        if found is None:
            figures.update(self.p.time_figures(self.env))
            found = self._check(self.p.other_rules, figures)
        self._cache[plan] = figures, found
        return figures, found

    def _check(
        self, rules: tuple[CompiledConstraint, ...], figures: Mapping[str, float]
    ) -> Violation | None:
        env = self.env
        for name, value in figures.items():
            env["estimate." + name] = value
        for c in rules:
            try:
                if not c.when.evaluate(env) or c.require.evaluate(env):
                    continue
            except FormulaError as exc:
                raise FormulaError(f"constraint '{c.rule.id}': {exc.message}", exc.where) from None
            key = (c.rule.id, *[env[n] for n in sorted(c.reason.names)])
            if key not in self._reasons:
                self._reasons[key] = c.reason.render(env)
            return Violation(c.rule.id, c.rule.severity, self._reasons[key])
        return None

    def _keep(self, into: list[_Scored], plan: tuple[Any, ...], figures: dict[str, float]) -> None:
        key = (
            ranking_key(figures, plan, self.r.objective)
            if into is self.fitting
            else (figures["memory_total"],)
        )
        into.append(_Scored(key, len(into), plan, figures))

    def _memory_bound(
        self, head: tuple[int, ...], mbss: list[int], mems: list[MemoryOption]
    ) -> Violation | None:
        """The memory violation every candidate under `head` shares, when even the most frugal
        ones (smallest allowed mbs, full recomputation, most sharding) break a memory rule."""
        for mbs in mbss:
            accum, found = self._micro(head[0], mbs)
            if found is None:
                break
        else:
            return None
        options = self.r.options
        most_sp = head[1] > 1 and options.sequence_parallel
        frugal = [
            m
            for m in mems
            if m.recompute == options.recompute[-1] and m.sequence_parallel == most_sp
        ]
        allowed = [m for m in frugal if not (self._set_memory(m) or self._first(MEMORY))]
        zeros = [m for m in allowed if not m.distributed_optimizer]
        reps = [max(zeros, key=lambda m: m.zero_stage)] if zeros else []
        reps += [m for m in allowed if m.distributed_optimizer]
        broken: list[tuple[float, Violation, tuple[Any, ...]]] = []
        for mem in reps:
            self._set_memory(mem)
            plan = (*head, mbs, accum, *mem)
            figures, found = self._assess(plan)
            if "time_step_s" in figures:  # it fits memory: no bound
                return None
            broken.append((figures["memory_total"], found, plan))  # type: ignore[arg-type]
        for _, _, plan in broken:
            self._keep(self.unfit, plan, self._cache[plan][0])
        return min(broken, key=lambda b: b[0])[1] if broken else None

    def result(self) -> PlanResult:
        """The ranked result; the closest candidates (least memory) when nothing fits."""
        top = heapq.nsmallest(self.r.top, self.fitting, key=lambda s: (s.key, s.order))
        feasible = bool(top)
        if not feasible:
            top = heapq.nsmallest(self.r.top, self.unfit, key=lambda s: (s.key, s.order))
        if not top:
            reasons = "; ".join(f"{r} ({n})" for r, n in self.rejected.most_common())
            world, name = self.r.cluster.num_gpus, self.r.spec.name
            raise PlanError(f"no layout of {world} GPUs can run {name}: {reasons}")
        estimates = [self.estimate(s.plan) for s in top]
        return PlanResult(
            chosen=estimates[0], candidates=estimates, rejected=dict(self.rejected.most_common()),
            advice=[], feasible=feasible, objective=self.r.objective, searched=self.searched,
            evaluated=self.evaluated,
        )  # fmt: skip

    def estimate(self, plan: tuple[Any, ...]) -> Estimate:
        """The full, typed estimate of one candidate, evaluated as every layout is."""
        layout = layout_of(plan, self.r)
        self.env.update(self.p.cost.plan_env(layout))
        return self.p.evaluator.evaluate_env(layout, self.env).estimate
