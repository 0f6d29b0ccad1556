"""The Python API for training repositories: plan a job, then take its DeepSpeed config or its
Megatron-LM arguments, or write plan.json.

    import parplan_gen
    plan = parplan_gen.plan("llama-3-8b", {"gpus": 8, "gpu": "h100"},
                            global_batch=512, seq_len=8192)
    plan.chosen.plan.tp               # the chosen layout (a Layout)
    plan.document                     # the plan: what plan.json holds, the views and files read
    ds_config = plan.deepspeed_config()   # deepspeed.initialize(config=ds_config)
    argv = plan.megatron_args()           # pretrain_gpt.py arguments
    plan.write("plan/")                   # plan.json
    result = parplan_gen.estimate("llama-3-8b", {"gpus": 8, "gpu": "h100"},
                                  {"tp": 2, "global_batch": 512, "seq_len": 8192})
    result.fits, result.violations       # the memory rules' verdict, every rule broken
    parplan_gen.compare("llama-3-8b", {"gpus": 8, "gpu": "h100"}, global_batch=512)  # why
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from parplan_gen.cost.estimate import Estimate
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.layout import MAX_GPUS, Layout, build_layout, check_sizes, given_layout
from parplan_gen.inputs.defaults import GIB
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.kind import ANY_BACKEND, TrainedModel
from parplan_gen.planning.advice import Advice, advise
from parplan_gen.planning.budget import (
    check_budget_request,
    compute_budget,
    request_tokens,
    scaled,
    smallest_count,
)
from parplan_gen.planning.document import PlanDocument
from parplan_gen.planning.evaluate import Evaluation, evaluate
from parplan_gen.planning.loading import load_cluster_spec, load_model
from parplan_gen.planning.pins import (
    Bounds,
    Headroom,
    Pins,
    SearchRecord,
    headroom_record,
    parse_headroom,
    search_limits,
)
from parplan_gen.planning.planner import PlanError, Planner, SearchResult
from parplan_gen.planning.sanity import sanity_warnings
from parplan_gen.planning.search_space import Objective, Request, SearchOptions, backends_for
from parplan_gen.rules.engine import Proposal
from parplan_gen.rules.ruleset import RuleSet, load_rules

if TYPE_CHECKING:
    from parplan_gen.render.compare import Comparison


def proposals_for(
    spec: TrainedModel, cluster: Cluster, rules: RuleSet, seq_len: int
) -> list[Proposal]:
    """The rules engine's proposals for the model's op graph on the cluster's GPUs."""
    from parplan_gen.rules.engine import propose

    return propose(spec.op_graph(seq_len), rules, cluster.num_gpus)


class Plan(BaseModel):
    """A plan: its document (what plan.json holds and what the text view, `plan --json` and the
    renderer read: the model, the cluster, the chosen estimate and the runners-up, the
    rejections, the advice, the rules' proposals) and what the search adds to it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    document: PlanDocument
    feasible: bool  # False: nothing fits; the chosen layout is the closest candidate
    objective: Objective
    searched: int  # candidates in the search space
    evaluated: int  # candidates the cost model estimated
    advice: list[Advice]  # when nothing fits, each change measured; document.advice: their notes

    @property
    def chosen(self) -> Estimate:
        """The chosen layout's estimate (the closest candidate when nothing fits)."""
        return self.document.chosen

    def deepspeed_config(self) -> dict[str, Any]:
        """The dict for `deepspeed.initialize(config=...)`: ds_config.json as rendered."""
        from parplan_gen.render.plan_files import deepspeed_config

        return deepspeed_config(self.document)

    def megatron_args(self) -> list[str]:
        """The `pretrain_gpt.py` argument list of megatron_args.sh as rendered (transformers
        only: for an op-graph model, launched with DeepSpeed / torchrun, a RenderError)."""
        from parplan_gen.render.plan_files import megatron_args

        return megatron_args(self.document)

    def write(self, out_dir: str | Path, **options: Any) -> list[Path]:
        """Render every file (plan.json, ds_config.json, megatron_args.sh for a transformer,
        nccl.env, launchers, plan.md) into `out_dir`. `options` are those of `parplan render`
        (render.render_options.RenderOptions: templates, force, hf_trainer, force_nccl_algo,
        megatron_version, deepspeed_version); an existing different file is refused unless
        `force=True`."""
        from parplan_gen.render.render_options import RenderOptions, write_plan

        status = write_plan(self.document, out_dir, RenderOptions(**options))
        return [Path(out_dir) / name for name in sorted(status)]


def plan(
    model: TrainedModel | str | Path,
    cluster: Cluster | Mapping[str, Any] | str | Path,
    *,
    global_batch: int,
    seq_len: int | None = None,
    precision: str = "bf16",
    objective: Objective = "time",
    top: int = 5,
    flash_attention: bool = True,
    backend: str | Sequence[str] = ANY_BACKEND,
    rules: Sequence[str | Path] | RuleSet = (),
    pins: Pins | Mapping[str, Any] | None = None,
    bounds: Bounds | Mapping[str, Any] | None = None,
    headroom: float | str | Headroom | None = None,
    tokens: float | str | None = None,
    days: float | None = None,
    gpu_hour_price: float | None = None,
) -> Plan:
    """Plan `model` on `cluster`: the fastest layout that fits (objective `time`) or the
    smallest (`memory`), the best `top`, the rejections by reason and, when nothing fits, the
    closest candidate with advice. `backend` (a name or several: `megatron`, `deepspeed`,
    `ddp`, `torchtitan`; `any`: every backend that trains the model) limits the search to what
    those backends run; `rules` layers rule directories over the built-in ones (or is a loaded
    RuleSet). `seq_len` defaults to 2048 tokens for a transformer; a graph model has none (1).

    `pins` fixes layout fields (`{"tp": 8, "recompute": "selective"}`), `bounds` limits sizes
    (`{"max_pp": 4, "min_dp": 8}`), `headroom` keeps memory free per GPU (GiB, `"10%"` of the
    GPU's, or None: the rule `memory_headroom_default`); planning/pins.py. `tokens` (`"15T"`,
    `2e12`) adds the training budget (plan.document.budget, None when nothing fits;
    `gpu_hour_price` prices it); with `days` too, the cluster's GPU count is searched: the
    smallest whole number of nodes whose best plan trains `tokens` within `days`
    (planning/budget.py)."""
    check_budget_request(tokens, gpu_hour_price)  # before any search, as the flags are
    if days is not None:
        return _plan_by_deadline(
            model, cluster, days=days, tokens=tokens, global_batch=global_batch, seq_len=seq_len,
            precision=precision, objective=objective, top=top, flash_attention=flash_attention,
            backend=backend, rules=rules, pins=pins, bounds=bounds, headroom=headroom,
            gpu_hour_price=gpu_hour_price,
        )  # fmt: skip
    check_sizes(global_batch=global_batch, seq_len=seq_len)
    ruleset = rules if isinstance(rules, RuleSet) else load_rules(rules)
    spec, machines = load_model(model), load_cluster_spec(cluster)
    planner, request, result, record, proposals = _search(
        spec, machines, ruleset, global_batch=global_batch, seq_len=seq_len, precision=precision,
        objective=objective, top=top, flash_attention=flash_attention, backend=backend,
        pins=pins, bounds=bounds, headroom=headroom,
    )  # fmt: skip
    advice = [] if result.feasible else advise(planner, request, result)
    document = PlanDocument.from_parts(
        model=spec, cluster=machines, chosen=result.chosen, candidates=result.candidates,
        rejected=result.rejected, advice=[a.note for a in advice], proposals=proposals,
        rules=ruleset, warnings=sanity_warnings(spec, machines, result.chosen), search=record,
        feasible=result.feasible,
        budget=None if tokens is None or not result.feasible else compute_budget(
            ruleset, spec, machines, result.chosen, tokens=request_tokens(tokens),
            price=gpu_hour_price, flash_attention=flash_attention,
        ),
    )  # fmt: skip
    return Plan(
        document=document, feasible=result.feasible, objective=result.objective,
        searched=result.searched, evaluated=result.evaluated, advice=advice,
    )  # fmt: skip


def _search(
    spec: TrainedModel, machines: Cluster, rules: RuleSet, *, global_batch: int,
    seq_len: int | None, precision: str, objective: Objective, top: int, flash_attention: bool,
    backend: str | Sequence[str], pins: Pins | Mapping[str, Any] | None = None,
    bounds: Bounds | Mapping[str, Any] | None = None,
    headroom: float | str | Headroom | None = None,
) -> tuple[Planner, Request, SearchResult, SearchRecord, list[Proposal]]:  # fmt: skip
    """`plan`'s search alone (its arguments): the planner, the request, the ranked result,
    plan.json's `search` record and the seed's proposals. `check` needs only the result."""
    seq_len = spec.sequence_length(seq_len)
    limits = search_limits(pins, bounds)
    record = headroom_record(parse_headroom(headroom), limits, machines, rules, precision)
    proposals = proposals_for(spec, machines, rules, seq_len)
    request = Request(
        spec, machines, global_batch, seq_len, precision, objective, top,  # type: ignore[arg-type]
        flash_attention, SearchOptions.for_model(spec, proposals, backend, limits),
        record.headroom_bytes,
    )  # fmt: skip
    planner = Planner(rules, spec.kind)
    return planner, request, planner.plan(request), record, proposals


def _plan_by_deadline(
    model: Any, cluster: Any, *, days: float, tokens: float | str | None, **request: Any
) -> Plan:
    """`plan(tokens=N, days=D)`: the plan on the smallest GPU count that meets the deadline
    (planning/budget.smallest_count), its budget recording every count tried."""
    if tokens is None:
        raise InputError("days: give tokens too (the deadline is for training that many tokens)")
    if not (isinstance(days, int | float) and not isinstance(days, bool) and 0 < days < math.inf):
        raise InputError(f"days: expected a number of days above 0, got {days!r}")
    rules = request.pop("rules", ())
    request["rules"] = rules if isinstance(rules, RuleSet) else load_rules(rules)
    spec, base = load_model(model), load_cluster_spec(cluster)
    plans: dict[int, Plan] = {}

    def wall_days(gpus: int) -> float | None:
        try:
            found = plan(spec, scaled(base, gpus), tokens=tokens, **request)
        except PlanError:
            return None
        plans[gpus] = found
        budget = found.document.budget
        return budget.wall_days if found.feasible and budget is not None else None

    deadline = smallest_count(wall_days, base.gpus_per_node, float(days))
    if deadline.gpus is None:
        raise InputError(
            f"--days {days:g}: no count of up to {MAX_GPUS} GPUs ({base.gpus_per_node} per node) "
            f"trains {request_tokens(tokens):.3g} tokens in time (tried {', '.join(deadline.tried)})"
        )
    chosen = plans[deadline.gpus]
    budget = chosen.document.budget.model_copy(update={"deadline": deadline})  # type: ignore[union-attr]
    document = chosen.document.model_copy(update={"budget": budget})
    return chosen.model_copy(update={"document": document})


def plan_all_backends(model: Any, cluster: Any, **request: Any) -> dict[str, Plan | str]:
    """`plan` per backend of `backend` (default any), each search restricted to it (`plan
    --all-backends`): backend -> its own best plan (labelled `best_on` it), or why none runs."""
    spec, found = load_model(model), {}
    rules = request.pop("rules", ())
    request["rules"] = rules if isinstance(rules, RuleSet) else load_rules(rules)  # once
    cluster = load_cluster_spec(cluster)
    for name in backends_for(spec, request.pop("backend", ANY_BACKEND)):
        try:
            one = plan(spec, cluster, backend=name, **request)
        except PlanError as exc:
            found[name] = exc.message
            continue
        memory, label = one.chosen.memory, {"best_on": name}
        found[name] = (
            one.model_copy(update={"document": one.document.model_copy(update=label)})
            if one.feasible else f"nothing fits (the closest layout needs {memory.total / GIB:.1f}"
            f" GiB per GPU of {memory.capacity / GIB:.1f})"
        )  # fmt: skip
    return found


def compare(
    model: TrainedModel | str | Path,
    cluster: Cluster | Mapping[str, Any] | str | Path,
    *,
    global_batch: int,
    seq_len: int | None = None,
    layouts: Sequence[Layout | Mapping[str, Any]] = (),
    runner_up: bool = True,
    **request: Any,
) -> Comparison:
    """The chosen plan (`plan` with `request`'s options), the runner-up (unless `runner_up` is
    False) and each of `layouts` (a Layout, or its fields as for `estimate`, where a `backend`
    key names the backend whose rules judge it) side by side, term by term, with one sentence
    per term that differs saying why the chosen plan wins there (render/compare.py)."""
    from parplan_gen.render.compare import compare_estimates, fit_problem

    rules = request.pop("rules", ())
    ruleset = rules if isinstance(rules, RuleSet) else load_rules(rules)
    spec, machines = load_model(model), load_cluster_spec(cluster)
    found = plan(spec, machines, global_batch=global_batch, seq_len=seq_len, rules=ruleset,
                 **request)  # fmt: skip
    doc, flash = found.document, request.get("flash_attention", True)
    columns = [("chosen", doc.chosen, fit_problem(doc.chosen))]
    columns += [("runner-up", e, fit_problem(e)) for e in doc.runners_up[:runner_up]]
    for given in layouts:
        fields = {"global_batch": global_batch, "seq_len": doc.chosen.plan.seq_len, **given} \
            if not isinstance(given, Layout) else given  # fmt: skip
        backend = fields.pop("backend", None) if isinstance(fields, dict) else None
        mine = estimate(spec, machines, fields, rules=ruleset, flash_attention=flash,
                        backend=backend)  # fmt: skip
        columns.append(("yours", mine.estimate, mine.problem()))
    return compare_estimates(machines, columns, spec.time_parts, spec.layout_dims)


@dataclass(frozen=True)
class CheckReport(Evaluation):
    """`parplan check`: the layout's evaluation (its estimate and every rule it breaks) and a
    better plan if the planner finds one."""

    model: TrainedModel
    cluster: Cluster
    better: Estimate | None  # the planner's choice when it is faster (or the layout cannot run)
    planner_found: bool = True  # False: no layout of the request fits and meets every rule

    @property
    def runs_as_given(self) -> bool:
        """No `invalid` rule is broken and it fits (the memory rules hold): `check` exits 0."""
        return self.runnable and self.fits

    @property
    def warnings(self) -> list[str]:
        """The sanity warnings on the layout (planning.sanity); never a reason to refuse it."""
        return sanity_warnings(self.model, self.cluster, self.estimate)

    def contract(self) -> dict[str, Any]:
        """JSON: the estimate, the violations, fits / by how much, whether it runs as given
        (and why not), and the better plan."""
        memory = self.estimate.memory
        return {
            **self.estimate.contract(),
            "violations": [dataclasses.asdict(v) for v in self.violations],
            "runnable": self.runnable,
            "over_capacity_bytes": max(0, memory.total - memory.capacity),
            "runs_as_given": self.runs_as_given,
            "problem": self.problem(),
            "better": None if self.better is None else self.better.contract(),
            "warnings": self.warnings,
        }


def check(
    model: TrainedModel | str | Path,
    cluster: Cluster | Mapping[str, Any] | str | Path,
    layout: Layout | Mapping[str, Any],
    *,
    rules: Sequence[str | Path] | RuleSet = (),
    flash_attention: bool = True,
    backend: str | None = None,
    any_backend: bool = False,
) -> CheckReport:
    """Check an existing layout on `backend` (None: the first of the model's backends that runs
    it): every rule it breaks, its estimate (also when it cannot run), and the planner's choice
    for the same batch on the same backend (`any_backend`: on any) when that is faster.
    `layout`: a Layout or, as `estimate` takes it, a dict (a bad one: `layout.KEY: ...`)."""
    ruleset = rules if isinstance(rules, RuleSet) else load_rules(rules)
    spec, machines = load_model(model), load_cluster_spec(cluster)
    with given_layout(layout) as given:  # a dict: estimate builds the Layout, as for its own
        found = estimate(
            spec, machines, given, rules=ruleset, flash_attention=flash_attention, backend=backend
        )
    layout, same = found.estimate.plan, found.estimate.backend
    try:  # plan()'s search for the same batch (its chosen layout is the plan's), nothing more
        best = _search(
            spec, machines, ruleset, global_batch=layout.global_batch, seq_len=layout.seq_len,
            precision=layout.precision, objective="time", top=1, flash_attention=flash_attention,
            backend=ANY_BACKEND if any_backend or same is None else same.name,
        )[2]  # fmt: skip
    except PlanError:
        best = None
    faster = best is not None and best.chosen.time.step_s < found.estimate.time.step_s
    better = (
        best.chosen if best is not None and best.feasible and (found.violations or faster) else None
    )
    return CheckReport(
        found.estimate, found.violations, model=spec, cluster=machines, better=better,
        planner_found=best is not None and best.feasible,
    )  # fmt: skip


def estimate(
    model: TrainedModel | str | Path,
    cluster: Cluster | Mapping[str, Any] | str | Path,
    layout: Layout | Mapping[str, Any],
    *,
    rules: Sequence[str | Path] | RuleSet = (),
    flash_attention: bool = True,
    backend: str | None = None,
) -> Evaluation:
    """Estimate one layout: its memory, time and throughput, and every constraint rule it
    breaks; `fits` is the memory rules' verdict. `layout` is a Layout or its sizes as a dict
    (`{"tp": 2, "global_batch": 512, "seq_len": 8192}`; dp defaults to what the other sizes
    leave, `seq_len` to 2048 tokens for a transformer); `rules` layers rule directories over
    the built-in ones (or is a loaded RuleSet). `backend`: the backend whose rules judge it
    (None: the first of the model's backends that runs it)."""
    ruleset = rules if isinstance(rules, RuleSet) else load_rules(rules)
    spec, machines = load_model(model), load_cluster_spec(cluster)
    names = None if backend in (None, ANY_BACKEND) else backends_for(spec, backend)
    if not isinstance(layout, Layout):
        sizes = dict(layout)
        sizes["seq_len"] = spec.sequence_length(sizes.get("seq_len"))
        layout = build_layout(machines.num_gpus, **sizes)
    return evaluate(
        spec, machines, layout, ruleset, flash_attention=flash_attention,
        backend=None if names is None else names[0],
    )  # fmt: skip
