"""`plan`: search the layouts of a model on a cluster and make the plan document, and `Plan`,
what it returns (the document plus what the search found)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from parplan_gen.api.wording import parameter_wording
from parplan_gen.cost.budget_figures import BudgetInputs
from parplan_gen.cost.estimate import Estimate
from parplan_gen.cost.hardware import Cluster, ClusterSetup
from parplan_gen.cost.launch_site import LaunchSettings
from parplan_gen.cost.layout import MAX_GPUS, check_sizes
from parplan_gen.inputs.defaults import GIB
from parplan_gen.inputs.errors import InputError
from parplan_gen.models.any_model import AnyModelSpec
from parplan_gen.models.kind import ANY_BACKEND, TrainedModel
from parplan_gen.planning.advice import Advice, advise
from parplan_gen.planning.budget import (
    CountOutcome,
    check_budget_request,
    compute_budget,
    count_for_deadline,
    request_tokens,
    scaled,
)
from parplan_gen.planning.document import PlanDocument
from parplan_gen.planning.loading import (
    ClusterArgument,
    load_cluster_setup,
    load_model,
    load_ruleset,
)
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
from parplan_gen.planning.search_choices import SearchChoices, choose, search_choices
from parplan_gen.planning.search_space import Objective, Request, SearchOptions
from parplan_gen.rules.engine import Proposal
from parplan_gen.rules.ruleset import RuleSet


def proposals_for(
    spec: TrainedModel, cluster: Cluster, rules: RuleSet, seq_len: int
) -> list[Proposal]:
    """The rules engine's proposals for the model's op graph on the cluster's GPUs."""
    from parplan_gen.rules.engine import propose

    return propose(spec.op_graph(seq_len), rules, cluster.num_gpus)


class Plan(BaseModel):
    """A plan: its document (what plan.json holds and what the text view, `plan --json` and the
    renderer read: the model, the cluster's hardware, launch site and budget inputs, the chosen
    estimate and the runners-up, the rejections, the advice, the rules' proposals) and what the
    search adds to it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    document: PlanDocument
    feasible: bool  # False: nothing fits; the chosen layout is the closest candidate
    objective: Objective
    searched: int  # candidates in the search space
    evaluated: int  # candidates the cost model estimated
    advice: list[Advice]  # when nothing fits, each change measured; document.advice: their notes
    # The rules that bound the search (`bounds_search`) and left layouts out of it (not
    # candidates, not in `document.rejected`): `reason [rule id, bounds the search]`.
    bounded: list[str] = []

    @property
    def chosen(self) -> Estimate:
        """The chosen layout's estimate (the closest candidate when nothing fits)."""
        return self.document.chosen

    def closest_needs(self) -> str:
        """`the closest layout needs 143.7 GiB per GPU, the GPU has 40.0 GiB`: what a search
        where nothing fits says of its closest candidate (the API's error, the CLI's last line),
        with what it keeps free and `host_shortfall`."""
        memory = self.chosen.memory
        return (
            f"the closest layout needs {memory.total / GIB:.1f} GiB per GPU{memory.kept_free_text()}, "
            f"the GPU has {memory.capacity / GIB:.1f} GiB{self.host_shortfall()}"
        )

    def host_shortfall(self) -> str:
        """`, and 27.0 GiB of pinned host memory per GPU, of the host's 0.9 GiB`: where the closest
        candidate fits the GPU's memory and offloads activations on a cluster whose host memory
        is known, the host's it does not fit (rule memory.offload_fits_host); "" otherwise."""
        memory, host = self.chosen.memory, self.document.cluster.host_memory_per_gpu
        if memory.needed > memory.capacity or not memory.host_offload or not host:
            return ""
        return (
            f", and {memory.host_offload / GIB:.1f} GiB of pinned host memory per GPU, of the "
            f"host's {host / GIB:.1f} GiB"
        )

    @parameter_wording
    def deepspeed_config(self) -> dict[str, Any]:
        """The dict for `deepspeed.initialize(config=...)`: ds_config.json as rendered."""
        from parplan_gen.render.plan_files import deepspeed_config

        return deepspeed_config(self.document)

    @parameter_wording
    def megatron_args(self) -> list[str]:
        """The `pretrain_gpt.py` argument list of megatron_args.sh as rendered (transformers
        only: for an op-graph model, launched with DeepSpeed / torchrun, a RenderError)."""
        from parplan_gen.render.plan_files import megatron_args

        return megatron_args(self.document)

    @parameter_wording
    def write(self, out_dir: str | Path, **options: Any) -> list[Path]:
        """Render every file (plan.json, ds_config.json, megatron_args.sh for a transformer,
        nccl.env, launchers, plan.md) into `out_dir`. `options` are those of `parplan render`
        (render.render_options.RenderOptions: templates, force, hf_trainer, force_nccl_algo,
        megatron_version, deepspeed_version); an existing different file is refused unless
        `force=True`."""
        from parplan_gen.render.render_options import RenderOptions, write_plan

        status = write_plan(self.document, out_dir, RenderOptions(**options))
        return [Path(out_dir) / name for name in sorted(status)]


class Search(NamedTuple):
    """`plan`'s search alone: the planner, the request, the ranked result, plan.json's `search`
    record and the seed's proposals."""

    planner: Planner
    request: Request
    result: SearchResult
    record: SearchRecord
    proposals: list[Proposal]


@parameter_wording
def plan(
    model: AnyModelSpec | str | Path,
    cluster: ClusterArgument,
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
    search: SearchChoices | Mapping[str, Any] | None = None,
    tokens: float | str | None = None,
    days: float | None = None,
    gpu_hour_price: float | None = None,
    launch: LaunchSettings | Mapping[str, Any] | None = None,
    budget_inputs: BudgetInputs | Mapping[str, Any] | None = None,
) -> Plan:
    """Plan `model` on `cluster`: the fastest layout that fits (objective `time`) or the
    smallest (`memory`), the best `top`, the rejections by rule and, when nothing fits, the
    closest candidate with advice. `backend` (a name or several: `megatron`, `deepspeed`,
    `ddp`, `torchtitan`; `any`: every backend that trains the model) limits the search to what
    those backends run; `rules` layers rule directories over the built-in ones (or is a loaded
    RuleSet). `seq_len` defaults to 2048 tokens for a transformer; a graph model has none (1).

    `pins` fixes layout fields (`{"tp": 8, "recompute": "selective"}`), `bounds` limits sizes
    (`{"max_pp": 4, "min_dp": 8}`), `headroom` keeps memory free per GPU (GiB, `"10%"` of the
    GPU's, or None: the rule `memory_headroom_share_default` of each layout's tensors);
    planning/pins.py. `search` sets the
    search options (`{"interleave": "off", "sequence_parallel": "search", "overlap_grad_reduce":
    False}`; each left out: its rule in rules/search/defaults.yaml; planning/search_choices.py).
    `tokens` (`"15T"`, `2e12`) adds the training budget (plan.document.budget, None when nothing
    fits; `gpu_hour_price` prices it); with `days` too, the cluster's GPU count is searched: the
    smallest whole number of nodes whose best plan trains `tokens` within `days`
    (planning/budget.py).

    `cluster` is a Cluster (the hardware alone), the CLI flags as a dict (their `slurm_*` and
    `cpus_per_node` keys are the launch site's), a cluster file, or a ClusterSetup (a cluster
    file's hardware, launch site and budget inputs: `cost.hardware.load_cluster_file`).
    `launch` (a LaunchSettings or a dict of its fields: the site the files are written for) and
    `budget_inputs` (a BudgetInputs or a dict of `gpu_hour_price`, `mtbf_gpu_hours`,
    `storage_gb_per_s`) replace the cluster's where given; `gpu_hour_price` goes before the
    inputs' price."""
    check_budget_request(tokens, gpu_hour_price)  # before any search, as the flags are
    asked: dict[str, Any] = {
        "global_batch": global_batch,
        "seq_len": seq_len,
        "precision": precision,
        "objective": objective,
        "top": top,
        "flash_attention": flash_attention,
        "backend": backend,
        "pins": pins,
        "bounds": bounds,
        "headroom": headroom,
        "search": search,
    }
    if days is None:
        check_sizes(global_batch=global_batch, seq_len=seq_len)
    else:  # each GPU count tried checks the sizes
        _check_deadline(days, tokens)
    ruleset = load_ruleset(rules)
    spec = load_model(model)
    setup = load_cluster_setup(cluster, launch=launch, budget_inputs=budget_inputs)
    machines = setup.cluster
    if days is not None:
        return _plan_by_deadline(
            spec, setup, ruleset, days=days, tokens=tokens, price=gpu_hour_price, asked=asked
        )
    found = search_plan(spec, machines, ruleset, **asked)
    result = found.result
    advice = [] if result.feasible else advise(found.planner, found.request, result)
    budget = None
    if tokens is not None and result.feasible:
        budget = compute_budget(
            ruleset,
            spec,
            machines,
            result.chosen,
            tokens=request_tokens(tokens),
            price=gpu_hour_price,
            inputs=setup.budget_inputs,
            flash_attention=flash_attention,
        )
    document = PlanDocument.from_parts(
        model=spec,
        cluster=machines,
        launch=setup.launch,
        budget_inputs=setup.budget_inputs,
        chosen=result.chosen,
        candidates=result.candidates,
        rejected=result.rejected,
        advice=[a.note for a in advice],
        proposals=found.proposals,
        rules=ruleset,
        warnings=sanity_warnings(
            spec,
            machines,
            result.chosen,
            searched=result.feasible and found.request.options.limits.allows("cp", 1),
            without_cp=result.without_cp,
        ),
        search=found.record,
        feasible=result.feasible,
        budget=budget,
    )
    return Plan(
        document=document,
        feasible=result.feasible,
        objective=result.objective,
        searched=result.searched,
        evaluated=result.evaluated,
        advice=advice,
        bounded=result.bounded,
    )


def search_plan(
    spec: TrainedModel,
    machines: Cluster,
    rules: RuleSet,
    *,
    global_batch: int,
    seq_len: int | None,
    precision: str,
    objective: Objective,
    top: int,
    flash_attention: bool,
    backend: str | Sequence[str],
    pins: Pins | Mapping[str, Any] | None = None,
    bounds: Bounds | Mapping[str, Any] | None = None,
    headroom: float | str | Headroom | None = None,
    search: SearchChoices | Mapping[str, Any] | None = None,
) -> Search:
    """`plan`'s search alone, for its arguments (the seed's proposals are shown, never searched:
    the search options come from `search` and rules/search/defaults.yaml). `check` needs only
    the result."""
    seq_len = spec.sequence_length(seq_len)
    limits = search_limits(pins, bounds)
    record = headroom_record(parse_headroom(headroom), limits, machines, rules, precision)
    chosen = choose(
        search_choices(search),
        rules,
        spec,
        machines,
        pins=limits.pins.given(),
        bounds=limits.bounds.given(),
        global_batch=global_batch,
        seq_len=seq_len,
        precision=precision,
        flash_attention=flash_attention,
        memory_headroom=record.memory_headroom,
    )
    request = Request(
        spec,
        machines,
        global_batch,
        seq_len,
        precision,  # type: ignore[arg-type]
        objective,
        top,
        flash_attention,
        SearchOptions.for_model(spec, chosen, backend, limits),
        record.memory_headroom,
    )
    planner = Planner(rules, spec.kind)
    proposals = proposals_for(spec, machines, rules, seq_len)
    return Search(planner, request, planner.plan(request), record.with_options(chosen), proposals)


def _check_deadline(days: float, tokens: float | str | None) -> None:
    """`days` is a number of days above 0, given with `tokens`."""
    if tokens is None:
        raise InputError("days: give tokens too (the deadline is for training that many tokens)")
    if not positive_number(days):
        raise InputError(f"days: expected a number of days above 0, got {days!r}")


def positive_number(value: object) -> bool:
    """`value` is a finite number above 0 (a bool is not a number here)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf


def _plan_by_deadline(
    spec: AnyModelSpec,
    base: ClusterSetup,
    rules: RuleSet,
    *,
    days: float,
    tokens: float | str | None,
    price: float | None,
    asked: dict[str, Any],
) -> Plan:
    """`plan(tokens=N, days=D)`: the plan on a GPU count that meets the deadline (planning/
    budget.count_for_deadline: the cheapest count tried when priced, else the smallest), its
    budget recording every count tried and why each lost."""
    plans: dict[int, Plan] = {}

    def outcome(gpus: int) -> CountOutcome:
        try:
            found = plan(
                spec,
                _on_gpus(base, gpus),
                rules=rules,
                tokens=tokens,
                gpu_hour_price=price,
                **asked,
            )
        except PlanError as exc:
            return CountOutcome(None, None, f"no layout runs: {exc.lead or exc.message}")
        plans[gpus] = found
        budget = found.document.budget
        if not found.feasible or budget is None:
            return CountOutcome(
                None, None, f"no layout fits in GPU memory ({found.closest_needs()})"
            )
        return CountOutcome(budget.wall_days, budget.cost, None)

    per_node = base.cluster.gpus_per_node
    deadline = count_for_deadline(outcome, per_node, float(days))
    if deadline.gpus is None:
        raise InputError(
            f"--days {days:g}: no count of up to {MAX_GPUS} GPUs ({per_node} per node) "
            f"trains {request_tokens(tokens):.3g} tokens in time (tried {', '.join(deadline.tried)})"
        )
    chosen = plans[deadline.gpus]
    budget = chosen.document.budget.model_copy(update={"deadline": deadline})  # type: ignore[union-attr]
    document = chosen.document.model_copy(update={"budget": budget})
    return chosen.model_copy(update={"document": document})


def _on_gpus(base: ClusterSetup, gpus: int) -> ClusterSetup:
    """`base` with `gpus` GPUs (planning/budget.scaled): a count runs on the first nodes the
    launch site names; an InputError when it needs more than are named."""
    cluster = scaled(base.cluster, gpus)
    launch = base.launch
    names = None if launch is None else launch.node_names
    if launch is not None and names is not None:
        if cluster.num_nodes > len(names):
            raise InputError(
                f"--days: the cluster file names {len(names)} node(s) (node_names); the deadline "
                f"search needs {cluster.num_nodes}: name more nodes, or none"
            )
        launch = launch.model_copy(update={"node_names": names[: cluster.num_nodes]})
    return ClusterSetup(cluster=cluster, launch=launch, budget_inputs=base.budget_inputs)
