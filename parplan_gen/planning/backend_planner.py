"""The search over one backend's layouts: keep what its constraints allow and what fits, rank.

This module owns the search of one backend's part of the space (`planner.Planner` runs one
per backend and merges them) and its pruning, the ranking and the count of rejected candidates
by rule (`planning.rejections`). The candidate space is `search_space`, constraints are rules
(`constraints`), figures come from the cost model (`estimate`); the planner adds no threshold
of its own. Advice for a request that nothing fits is `planning.advice.advise`.

The search goes structure (dp, tp, pp, cp, ep, etp) -> vpp -> mbs -> memory option. Each layout
rule is checked at the first level where every plan name it reads is known, so a broken rule rejects
a whole subtree at once (counted leaf by leaf). The cost model runs only for candidates that
pass, memory figures first and the step time only for those that fit. Three prunings rest on
stated properties of the cost model:

* memory grows with the micro-batch and with interleaving, and the GPU's shrinks with more
  sharding, recomputation, sequence parallelism, bf16 gradients, FP8 parameters and offloading
  (the host's grows with offloading: it bounds nothing): if the most frugal candidates of a
  (structure, vpp) do not fit the GPU, none does; once an option does not fit at some mbs, it
  does not fit at a larger one. A step without gradient accumulation is the exception (it may
  hold less than one with: Accelerate keeps FSDP2's unsharded gradients between the micro-
  batches it accumulates, rules/cost/memory.yaml fsdp2_grads_unsynced), so the micro-batch of
  one accumulation step is a frugal candidate of its own and is never pruned by smaller ones;
* recomputation and offloading never make a fixed layout faster, and FSDP2's blocks kept
  gathered (fsdp_reshard `never`: the backward's all-gathers skipped) never make it slower:
  with objective `time`, a variant of a layout that fits recomputing less (or offloading fewer
  layers, or keeping the blocks gathered) is dominated;
* the cost model's optional `time.floor_s` never exceeds `time.step_s` (checked on every
  candidate estimated in full): with objective `time`, a candidate that fits but whose floor
  already exceeds the K-th best step found before it, here or on the backends searched before
  (`steps`), cannot rank and is counted as outranked, without its other time figures; one
  without context parallelism only past the best such step too (`step_cutoff.py`).

Every candidate that is not ranked is counted under the first rule that removed it, with the
values of the plan fields that rule reads (a pruned candidate counts under the verdict of the
candidate that pruned it: the most frugal one of its (structure, vpp), or the same option at a
smaller micro-batch). A rule that bounds the search (`bounds_search`: the micro-batch limit)
is applied to the enumeration instead: the layouts it refuses are not candidates, neither
searched nor counted; the search keeps each such rule's refusal to name it (`SearchResult.
bounded`), and when nothing is left at all the planner's error says which rule bounded it away.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping
from typing import Any, NamedTuple

from parplan_gen.cost.estimate import Estimate, Figures
from parplan_gen.cost.layout import plan_values
from parplan_gen.inputs.errors import FormulaError, RuleError
from parplan_gen.models.kind import BackendName, ModelKind
from parplan_gen.planning.constraints import Violation, figures_read, first_violation
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.planning.memory_order import (
    Sharding,
    dominated_by,
    least_per_sharding,
)
from parplan_gen.planning.rejections import Refusal, tally
from parplan_gen.planning.search_levels import (
    LEVEL_OF,
    MEMORY,
    MEMORY_NAMES,
    MICRO,
    STRUCTURE,
    STRUCTURE_NAMES,
    VIRTUAL,
    check_bound,
    plan_names,
    rule_case,
    rule_level,
)
from parplan_gen.planning.search_result import SearchResult, ranking_key
from parplan_gen.planning.search_space import (
    RECOMPUTE,
    MemoryOption,
    Request,
    Structure,
    layout_of,
    mbs_options,
    memory_options,
    structures,
    vpp_options,
)
from parplan_gen.planning.step_cutoff import StepCutoff
from parplan_gen.rules.ruleset import CompiledConstraint, RuleSet

OUTRANKED = "outranked: fits, but slower than the best plans found before it"
_OUTRANKED = Refusal(None, OUTRANKED)
FLOOR, STEP = "time_floor_s", "time_step_s"  # a time the step never goes below; the step
FLOOR_TOLERANCE = 1e-9  # relative: a floor this close above a step time is that time, rounded


class Candidate(NamedTuple):
    """One candidate of the search: the Layout's plan fields (cost.layout.PLAN_FIELDS), in
    order; the rest of its Layout is the request's."""

    dp: int
    tp: int
    pp: int
    cp: int
    ep: int
    etp: int
    vpp: int
    mbs: int
    grad_accum: int
    zero_stage: int
    distributed_optimizer: bool
    sequence_parallel: bool
    recompute: str
    grad_reduce_dtype: str
    fp8_param_gather: bool
    precision_aware_optimizer: bool
    offload_layers: int
    fsdp_reshard: str
    overlap_grad_reduce: bool


# A candidate's fields before its memory option: its structure, vpp, mbs and grad_accum.
_Prefix = tuple[int, int, int, int, int, int, int, int, int]
_UNSEEN = object()


class _Scored(NamedTuple):
    key: tuple[float, ...]
    order: int
    plan: Candidate
    figures: dict[str, float]


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
        bounds: list[list[CompiledConstraint]] = [[] for _ in range(MEMORY + 1)]
        for constraint in self.constraints.layout:
            into = bounds if constraint.rule.bounds_search else levels
            into[rule_level(constraint)].append(constraint)
        for level, found in enumerate(bounds):
            for constraint in found:
                check_bound(constraint, level)
        self.levels = tuple(tuple(level) for level in levels)
        self.bounds = tuple(tuple(level) for level in bounds)  # bound each level's enumeration
        self.bound_names = tuple(
            tuple(sorted({n for c in level for n in plan_names(c)})) for level in bounds
        )
        self.level_names = tuple(
            tuple(sorted({n for c in level for n in plan_names(c)})) for level in levels
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
        # the step's floor, where the cost model gives one (none: every candidate in full)
        self.floored = ("time", FLOOR.removeprefix("time_")) in self.cost.formulas
        floor = {FLOOR} if self.floored else set()
        self.time_figures = Figures(self.cost, (needed - memory_needs) | floor, memory=False)
        self.floor_figures = Figures(self.cost, floor, memory=False)
        self.cases = {c.rule.id: rule_case(c) for c in self.constraints.all}

    def plan(self, request: Request, steps: StepCutoff | None = None) -> SearchResult:
        """Search the request's candidates on this backend and rank those that pass (module
        docstring); no candidate at all is an empty result. `steps`: the steps of the plans
        found before, on the backends searched before, to which this search adds its own
        (step_cutoff.py; None: this search's alone); a candidate whose floor (`time.floor_s`)
        exceeds what they set is outranked. No advice (`advise`)."""
        if request.spec.kind != self.kind:
            raise ValueError(f"a planner for {self.kind} models got {request.spec.name}")
        if request.options.backend != self.backend:
            raise ValueError(f"a {self.backend} planner got options for {request.options.backend}")
        floored = self.floored and request.objective == "time"
        if steps is None:
            steps = StepCutoff(request.top)
        search = _Search(self, request, steps if floored else None)
        search.run()
        return search.result()


# ---- the search ------------------------------------------------------------------------------


class _Search:
    """One run: the environment it mutates, the counts, and the scored candidates."""

    def __init__(
        self,
        planner: BackendPlanner,
        request: Request,
        steps: StepCutoff | None,
    ) -> None:
        # the step times the candidates must beat (module docstring); None: no floor pruning
        self.p, self.r, self.steps = planner, request, steps
        self.no_cp: _Scored | None = None  # the best fitting candidate with cp 1
        self.env: dict[str, object] = planner.cost.base_env(
            request.spec,
            request.cluster,
            global_batch=request.global_batch,
            seq_len=request.seq_len,
            precision=request.precision,
            flash_attention=request.flash_attention,
            memory_headroom=request.memory_headroom,
        )
        self.rejected: Counter[Refusal] = Counter()
        self.fitting: list[_Scored] = []
        self.unfit: list[_Scored] = []  # broke a memory rule only: the closest candidates
        self.evaluated = self.searched = 0
        self._cache: dict[Candidate, tuple[dict[str, float], Refusal | None]] = {}
        self._memo: list[dict[tuple[Any, ...], Refusal | None]] = [{} for _ in planner.levels]
        self._cases: dict[tuple[Any, ...], Refusal] = {}
        self._memory_names: dict[MemoryOption, dict[str, object]] = {}  # an option's env names
        self._bound_memo: list[dict[tuple[Any, ...], Violation | None]] = [
            {} for _ in planner.bounds
        ]
        # each pp's vpp options, each dp's micro-batches, each tp's memory options
        self._vpps: dict[int, list[int]] = {}
        self._mbss: dict[int, list[int]] = {}
        self._mems: dict[int, list[MemoryOption]] = {}
        self.bounded: dict[str, str] = {}  # rule id -> its reason for the first layout left out

    def run(self) -> None:
        """Visit every structure of the cluster's world size within the search's bounds."""
        for head in structures(self.r.cluster.num_gpus, self.r.spec.is_moe, self.r.options):
            self.env.update(zip(STRUCTURE_NAMES, head, strict=True))
            if not self.p.bounds[STRUCTURE] or self._within(STRUCTURE, {}):
                self._structure(head)

    def _within(self, level: int, names: Mapping[str, object]) -> bool:
        """Whether the rules that bound the search at `level` allow the candidate with `names`
        set in the environment; the first that does not is kept (by id) to be named."""
        env, memo = self.env, self._bound_memo[level]
        env.update(names)
        # memoised on the plan names the level's bounds read: within one search nothing else
        # varies (as in `_first`)
        key = tuple([env[n] for n in self.p.bound_names[level]])
        if key in memo:
            broken = memo[key]
        else:
            broken = memo[key] = first_violation(self.p.bounds[level], env)
        if broken is None:
            return True
        self.bounded.setdefault(broken.rule_id, broken.reason)
        return False

    def _bounded_values(self, head: Structure) -> tuple[list[int], list[int], list[MemoryOption]]:
        """The vpp, micro-batch and memory options of `head` within the search's bounds (a
        level no rule bounds keeps them all)."""
        r = self.r
        vpps = self._vpps.get(head.pp)
        if vpps is None:
            vpps = self._vpps[head.pp] = vpp_options(r.layers, head.pp, r.options)
        mbss = self._mbss.get(head.dp)
        if mbss is None:
            mbss = self._mbss[head.dp] = mbs_options(r.global_batch, head.dp, r.options.limits)
        mems = self._mems.get(head.tp)
        if mems is None:
            mems = self._mems[head.tp] = memory_options(head.tp, r.options)
        bounds, dp, batch = self.p.bounds, head.dp, self.r.global_batch
        if bounds[VIRTUAL]:
            vpps = [v for v in vpps if self._within(VIRTUAL, {"plan.vpp": v})]
        if bounds[MICRO]:
            micro = lambda m: {"plan.mbs": m, "plan.grad_accum": batch // (m * dp)}  # noqa: E731
            mbss = [m for m in mbss if self._within(MICRO, micro(m))]
        if bounds[MEMORY]:
            mems = [
                m for m in mems if self._within(MEMORY, dict(zip(MEMORY_NAMES, m, strict=True)))
            ]
        return vpps, mbss, mems

    def _refusal(self, found: Violation) -> Refusal:
        """The case of a layout rule's violation: its reason and the plan values it reads."""
        case = self.p.cases[found.rule_id]
        values: Any = tuple([self.env[n] for n in case.plan_names])
        return Refusal(found.rule_id, found.reason, case.fields, values)

    def _first(self, level: int) -> Refusal | None:
        """The first layout rule of `level` the candidate breaks, memoised on the plan names
        the level reads (within one search nothing else varies)."""
        env, memo = self.env, self._memo[level]
        key = tuple([env[n] for n in self.p.level_names[level]])
        found = memo.get(key, _UNSEEN)
        if found is _UNSEEN:
            broken = first_violation(self.p.levels[level], env)
            found = memo[key] = None if broken is None else self._refusal(broken)
        return found  # type: ignore[return-value]

    def _count(self, found: Refusal, layouts: int) -> None:
        """Count `layouts` candidates under `found` (none: nothing to count, no case made)."""
        if layouts:
            self.rejected[found] += layouts

    def _structure(self, head: Structure) -> None:
        vpps, mbss, mems = self._bounded_values(head)
        self.env.update(zip(STRUCTURE_NAMES, head, strict=True))
        self.searched += len(vpps) * len(mbss) * len(mems)
        found = self._first(STRUCTURE)
        if found is not None:
            self._count(found, len(vpps) * len(mbss) * len(mems))
            return
        self._cache.clear()
        self.env["plan.vpp"] = 1  # memory does not shrink with interleaving: a bound for all vpp
        # Its candidates are closest ones only where vpp 1 is in the space (not with --vpp 2).
        flat_kept = 1 in vpps and self._first(VIRTUAL) is None
        flat = self._memory_bound(head, 1, mbss, mems, keep=flat_kept)
        for vpp in vpps:
            self.env["plan.vpp"] = vpp
            found = self._first(VIRTUAL)
            if found is not None:
                self._count(found, len(mbss) * len(mems))
                continue
            own = vpp > 1 and not (flat and flat_kept)  # the bound of this vpp's candidates
            bound = self._memory_bound(head, vpp, mbss, mems) if own else flat
            self._virtual(head, vpp, mbss, mems, bound)

    def _micro(self, dp: int, mbs: int) -> tuple[int, Refusal | None]:
        accum = self.r.global_batch // (mbs * dp)
        self.env["plan.mbs"], self.env["plan.grad_accum"] = mbs, accum
        return accum, self._first(MICRO)

    def _set_memory(self, mem: MemoryOption) -> None:
        names = self._memory_names.get(mem)
        if names is None:
            names = self._memory_names[mem] = dict(zip(MEMORY_NAMES, mem, strict=True))
        self.env.update(names)

    def _memory_allowed(self, mem: MemoryOption) -> bool:
        """Whether the layout rules of the memory level allow `mem` (set in the environment)."""
        self._set_memory(mem)
        return self._first(MEMORY) is None

    def _options(
        self, mems: list[MemoryOption], bound: Refusal | None
    ) -> tuple[list[MemoryOption], Counter[Refusal]]:
        """The options still open at this node, and the cases that close the others."""
        live, dead = [], Counter[Refusal]()
        for mem in mems:
            self._set_memory(mem)
            found = self._first(MEMORY) or bound
            if found is None:
                live.append(mem)
            else:
                dead[found] += 1
        return live, dead

    def _virtual(
        self,
        head: Structure,
        vpp: int,
        mbss: list[int],
        mems: list[MemoryOption],
        bound: Refusal | None,
    ) -> None:
        fixed = self._options(mems, bound) if self.p.memory_level_fixed else None
        failed: dict[MemoryOption, Refusal] = {}  # options that did not fit at a smaller mbs
        for mbs in mbss:
            accum, found = self._micro(head.dp, mbs)
            if found is not None:
                self._count(found, len(mems))
                continue
            if accum == 1:  # no accumulation: may hold less than a smaller mbs (docstring)
                failed = {}
            live, dead = fixed or self._options(mems, bound)
            self.rejected.update(dead)
            # the sharding (memory option less its recomputation) of each option that fits here
            fitted: set[Sharding] = set()
            prefix = (*head, vpp, mbs, accum)
            for mem in live:
                self._leaf(prefix, mem, failed, fitted)

    def _leaf(
        self,
        prefix: _Prefix,
        mem: MemoryOption,
        failed: dict[MemoryOption, Refusal],
        fitted: set[Sharding],
    ) -> None:
        """Estimate one candidate (its fields `prefix`, then the memory option `mem`) that
        passes every layout rule, unless it is pruned."""
        if mem in failed:
            self.rejected[failed[mem]] += 1
            return
        sharding = (
            mem.zero_stage,
            mem.distributed_optimizer,
            mem.sequence_parallel,
            mem.grad_reduce_dtype,
            mem.fp8_param_gather,
            mem.precision_aware_optimizer,
            mem.overlap_grad_reduce,
            mem.fsdp_reshard,
            mem.offload_layers > 0,
        )
        if self.r.objective == "time":
            dominated = dominated_by(sharding, fitted)
            if dominated is not None:
                self.rejected[dominated] += 1
                return
        self._set_memory(mem)
        plan = Candidate._make((*prefix, *mem))
        figures, found = self._assess(plan)
        if found is None or found is _OUTRANKED:
            if found is None:
                self._keep(self.fitting, plan, figures)
                if plan.cp == 1 and (self.no_cp is None or self.fitting[-1].key < self.no_cp.key):
                    self.no_cp = self.fitting[-1]
                if self.steps is not None:
                    self.steps.add(figures[STEP], plan.cp)
            else:
                self.rejected[found] += 1
            fitted.add(sharding)
            return
        self.rejected[found] += 1
        if STEP not in figures:  # broke a memory rule
            failed[mem] = found
            self._keep(self.unfit, plan, figures)

    def _assess(self, plan: Candidate) -> tuple[dict[str, float], Refusal | None]:
        """The candidate's figures and the first estimate rule it breaks (or `_OUTRANKED`); the
        time figures are computed only when the memory rules hold."""
        cached = self._cache.get(plan)
        if cached is not None:
            return cached
        self.evaluated += 1
        memo: dict[str, object] = {}  # the candidate's named formulas (see Evaluator.evaluate_env)
        figures = self.p.memory_figures(self.env, memo)
        found = self._check(self.p.memory_rules, figures, memo)
        if found is None:
            found = self._time(figures, memo)
        self._cache[plan] = figures, found
        return figures, found

    def _time(self, figures: dict[str, float], memo: dict[str, object]) -> Refusal | None:
        """Add the time figures of a candidate that fits and check the other estimate rules;
        `_OUTRANKED` when its floor passes the cutoff (module docstring)."""
        cutoff = None if self.steps is None else self.steps.now(self.env["plan.cp"] == 1)
        if cutoff is not None:
            figures.update(self.p.floor_figures(self.env, memo))
            if figures[FLOOR] > cutoff * (1 + FLOOR_TOLERANCE):
                return _OUTRANKED
        figures.update(self.p.time_figures(self.env, memo))
        if FLOOR in figures and figures[FLOOR] > figures[STEP] * (1 + FLOOR_TOLERANCE):
            raise RuleError(
                f"the estimate figure time.step_s ({figures[STEP]:.6g} s) is below time.floor_s "
                f"({figures[FLOOR]:.6g} s), which must never exceed it (docs/rules.md, estimate)"
            )
        return self._check(self.p.other_rules, figures, memo)

    def _check(
        self,
        rules: tuple[CompiledConstraint, ...],
        figures: Mapping[str, float],
        memo: dict[str, object],
    ) -> Refusal | None:
        env = self.env
        for name, value in figures.items():
            env["estimate." + name] = value
        for c in rules:
            try:
                if not c.when.evaluate(env, memo) or c.require.evaluate(env, memo):
                    continue
            except FormulaError as exc:
                raise FormulaError(f"constraint '{c.rule.id}': {exc.message}", exc.where) from None
            case = self.p.cases[c.rule.id]
            key = (c.rule.id, *[env[n] for n in case.names])
            if key not in self._cases:
                values: Any = tuple([env[n] for n in case.plan_names])
                self._cases[key] = Refusal(c.rule.id, c.reason.render(env), case.fields, values)
            return self._cases[key]
        return None

    def _keep(self, into: list[_Scored], plan: Candidate, figures: dict[str, float]) -> None:
        key = (
            ranking_key(figures, plan, self.r.objective)
            if into is self.fitting
            else (figures["memory_total"],)
        )
        into.append(_Scored(key, len(into), plan, figures))

    def _memory_bound(
        self,
        head: Structure,
        vpp: int,
        mbss: list[int],
        mems: list[MemoryOption],
        keep: bool = True,
    ) -> Refusal | None:
        """The GPU memory rule all candidates of (`head`, `vpp`) break, when even the most
        frugal (least mbs, and the mbs of one accumulation step (module docstring); full
        recompute, most sharding, for each sharding the smallest gradients, FP8 parameters and
        most offloading its rules allow; `keep`: closest) do."""
        least = next((m for m in mbss if self._micro(head.dp, m)[1] is None), None)
        if least is None or not mems:
            return None
        micro = [least]
        whole = self.r.global_batch // head.dp  # the micro-batch of one accumulation step
        if whole != least and whole in mbss and self._micro(head.dp, whole)[1] is None:
            micro.append(whole)
        most = max(RECOMPUTE.index(m.recompute) for m in mems)  # the most frugal left open
        most_sp = any(m.sequence_parallel for m in mems)
        frugal = [
            m
            for m in mems
            if RECOMPUTE.index(m.recompute) == most and m.sequence_parallel == most_sp
        ]
        broken: list[tuple[float, Refusal, Candidate]] = []
        for mbs in micro:
            accum, _ = self._micro(head.dp, mbs)  # the memory-level rules may read mbs
            allowed = least_per_sharding([m for m in frugal if self._memory_allowed(m)])
            zeros = [m for m in allowed if not m.distributed_optimizer]
            reps = [max(zeros, key=lambda m: m.zero_stage)] if zeros else []
            reps += [m for m in allowed if m.distributed_optimizer]
            for mem in reps:
                self._set_memory(mem)
                plan = Candidate._make((*head, vpp, mbs, accum, *mem))
                figures, found = self._assess(plan)
                if found is _OUTRANKED or STEP in figures:  # it fits memory: no bound
                    return None
                found = self._check(self.p.evaluator.gpu_memory_rules, figures, {})
                if found is None:  # only the host's memory rule broken: no bound either
                    return None
                broken.append((figures["memory_total"], found, plan))
        for _, _, plan in broken if keep else ():
            self._keep(self.unfit, plan, self._cache[plan][0])
        return min(broken, key=lambda b: b[0])[1] if broken else None

    def result(self) -> SearchResult:
        """The ranked result; the closest candidates (least memory) when nothing fits."""
        top = heapq.nsmallest(self.r.top, self.fitting, key=lambda s: (s.key, s.order))
        feasible = bool(top) or _OUTRANKED in self.rejected  # outranked ones fit: none to show
        if not feasible:
            top = heapq.nsmallest(self.r.top, self.unfit, key=lambda s: (s.key, s.order))
        no_cp = self.no_cp if top and top[0].plan.cp > 1 and feasible else None
        return SearchResult(
            candidates=[self.estimate(s.plan) for s in top],
            rejections=tally(self.rejected),
            feasible=feasible,
            objective=self.r.objective,
            searched=self.searched,
            evaluated=self.evaluated,
            bounded=[
                f"{reason} [{rule}, bounds the search]" for rule, reason in self.bounded.items()
            ],
            without_cp=None if no_cp is None else self.estimate(no_cp.plan),
        )

    def estimate(self, plan: Candidate) -> Estimate:
        """The full, typed estimate of one candidate, evaluated as every layout is."""
        layout = layout_of(plan, self.r)
        self.env.update(plan_values(layout))
        return self.p.evaluator.evaluate_env(layout, self.env).estimate
