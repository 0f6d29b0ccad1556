"""The training budget of a chosen plan (`plan --tokens N [--days D]`): time to train, GPU-hours,
cost, expected interruptions and the checkpoint interval that minimises lost work.

This module owns evaluating the budget rules (rules/budget/budget.yaml: every figure is a named
formula there, with its source) for one chosen estimate, and the search of a GPU count that
meets a deadline (`count_for_deadline`: the cheapest count tried that meets it when priced,
else the smallest). The budget's inputs (`BudgetInputs`: `gpu_hour_price`, `mtbf_gpu_hours`,
`storage_gb_per_s`) come from the cluster file or `plan(budget_inputs=...)` or, where they give
none, from the rules' defaults; where each came from is recorded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from parplan_gen.cost.budget_figures import BudgetInputs, budget_figure_problem
from parplan_gen.cost.catalog import GIGA
from parplan_gen.cost.estimate import Estimate
from parplan_gen.cost.hardware import FLAG_CLUSTER_NAME, Cluster
from parplan_gen.cost.host_links import host_bytes_per_s, host_link
from parplan_gen.cost.layout import MAX_GPUS
from parplan_gen.inputs.errors import InputError, SourceRef
from parplan_gen.inputs.number_text import token_count
from parplan_gen.models.any_model import transformer_of
from parplan_gen.models.kind import TrainedModel
from parplan_gen.planning.constraints import estimate_env
from parplan_gen.planning.evaluate import Evaluator
from parplan_gen.rules.ruleset import RuleSet

DAY_S = 86400.0
HOUR_S = 3600.0
RULES_FILE = "rules/budget/budget.yaml"


class Deadline(BaseModel):
    """How `--days D` chose the GPU count: every count tried, why each won or lost, and the rule
    that enumerates them (COUNT_ENUMERATION) and the one that chooses among them
    (COUNT_CHOICE)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    days: float = Field(description="The deadline asked for, days.")
    gpus: int | None = Field(
        description="The count chosen: the cheapest tried that meets it when priced, else the "
        "smallest (None: none)."
    )
    tried: dict[str, float | None] = Field(
        description="GPUs tried -> wall-clock days of their best plan (null: no plan fits)."
    )
    enumeration: str = Field(description="How the counts were enumerated.")
    # Absent from a plan.json written before the choice by cost: the smallest count was chosen.
    choice: Literal["smallest", "cheapest"] = Field(
        "smallest", description="How the count was chosen among those that meet it."
    )
    fastest: int | None = Field(
        None, description="The count tried whose plan trains soonest within the deadline."
    )
    costs: dict[str, float] = Field(
        default_factory=dict, description="GPUs tried -> cost of their plan (priced only)."
    )
    failures: dict[str, str] = Field(
        default_factory=dict, description="GPUs tried with no plan -> why none."
    )

    def meets(self, gpus: str) -> bool:
        """Whether the count `gpus` (a key of `tried`) trains within the deadline."""
        found = self.tried[gpus]
        return found is not None and found <= self.days

    def verdict(self, gpus: str) -> str:
        """Why the count `gpus` (a key of `tried`) was chosen or lost, in words."""
        found, chosen = self.tried[gpus], str(self.gpus)
        fastest = ", the fastest" if str(self.fastest) == gpus else ""
        if found is None:
            return self.failures.get(gpus, "no layout runs and fits")
        if found > self.days:
            return f"{found:,.1f} d: over the {self.days:g}-day deadline"
        cost = self.costs.get(gpus)
        if gpus == chosen:
            which = "cheapest" if self.choice == "cheapest" else "smallest"
            priced = f", costs {cost:,.0f}" if cost is not None else ""
            return f"{found:,.1f} d{priced}: chosen, the {which} that meets the deadline{fastest}"
        best = self.costs.get(chosen)
        if self.choice == "cheapest" and cost is not None and best is not None:
            return (
                f"{found:,.1f} d, costs {cost:,.0f}: {cost - best:,.0f} more than {chosen}{fastest}"
            )
        return f"{found:,.1f} d: meets it with more GPUs than {chosen}{fastest}"


class Budget(BaseModel):
    """plan.json `budget`: what training `tokens` on the chosen plan takes (rules/budget/)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: float = Field(description="Tokens to train.")
    tokens_per_step: float = Field(description="Global batch x sequence length.")
    steps: int = Field(description="Optimizer steps: tokens / tokens per step, rounded up.")
    step_s: float = Field(description="The chosen plan's predicted step time, s.")
    compute_days: float = Field(description="steps x step time, with no interruption, days.")
    checkpoint_bytes: float = Field(description="Weights + optimizer state, bytes.")
    storage_bytes_per_s: float = Field(description="Checkpoint write bandwidth, bytes/s.")
    storage_source: str = Field(description="Where the bandwidth came from.")
    checkpoint_write_s: float = Field(description="Checkpoint bytes / bandwidth, s.")
    checkpoint_interval_s: float = Field(
        description="Young 1974: sqrt(2 x blocking x MTBF), at least the floor, s."
    )
    checkpoints: float = Field(description="Checkpoints written over the run.")
    mtbf_gpu_hours: float = Field(description="MTBF per GPU, GPU-hours.")
    mtbf_source: str = Field(description="Where the MTBF came from.")
    job_mtbf_hours: float = Field(description="The job's MTBF: per GPU / GPUs, hours.")
    interruptions: float = Field(description="Expected unexpected interruptions over the run.")
    checkpoint_days: float = Field(description="Time spent writing checkpoints, days.")
    lost_days: float = Field(description="Work lost to interruptions and restarts, days.")
    wall_days: float = Field(description="compute + checkpoints + lost work, days.")
    compute_gpu_hours: float = Field(description="GPUs x compute days, GPU-hours.")
    gpu_hours: float = Field(description="GPUs x wall days, GPU-hours.")
    gpu_hour_price: float | None = Field(description="Price per GPU-hour (None: not given).")
    price_source: str | None = Field(description="`--gpu-hour-price`, the cluster file, None.")
    cost: float | None = Field(description="gpu_hours x price (None: no price given).")
    deadline: Deadline | None = Field(None, description="With `--days`: the GPU count search.")
    # Asynchronous checkpoints (rules/budget/budget.yaml budget_checkpoint_async); absent from
    # a plan.json written before them: blocking writes, restart = one checkpoint read.
    checkpoint_async: bool = Field(False, description="Written in the background.")
    checkpoint_blocking_s: float | None = Field(
        None, description="What training waits for per checkpoint: the write, or the copy, s."
    )
    host_bytes_per_s: float | None = Field(
        None, description="The GPU's host link, one direction, B/s (None: no figure)."
    )
    host_source: str | None = Field(None, description="Where the host link figure came from.")
    checkpoint_mode: str | None = Field(None, description="Which checkpointing applied, why.")
    restart_s: float | None = Field(None, description="What a restart costs, s.")
    checkpoint_floor_s: float | None = Field(
        None, description="The shortest interval the storage absorbs: copy + write, s."
    )


def budget_values(
    rules: RuleSet,
    cluster: Cluster,
    inputs: BudgetInputs | None,
    tokens: float,
    price: float | None,
) -> tuple[dict[str, float], dict[str, str | None]]:
    """The budget.* values and where each came from: the budget inputs of the cluster file (or
    --gpu-hour-price) when they give one, else the default rule."""
    given = inputs or BudgetInputs()
    if given.mtbf_gpu_hours is not None:
        mtbf, mtbf_from = given.mtbf_gpu_hours, "cluster file (mtbf_gpu_hours)"
    else:
        mtbf = float(_formula(rules, "budget_mtbf_gpu_hours_default")({}))  # type: ignore[arg-type]
        mtbf_from = f"default: budget_mtbf_gpu_hours_default ({RULES_FILE}, Llama 3 Sec. 3.3.4)"
    if given.storage_gb_per_s is not None:
        storage, storage_from = given.storage_gb_per_s * GIGA, "cluster file (storage_gb_per_s)"
    else:
        per_gpu = _formula(rules, "budget_storage_bytes_per_s_per_gpu_default")({})
        storage = float(per_gpu) * cluster.num_gpus  # type: ignore[arg-type]
        storage_from = (
            f"default: budget_storage_bytes_per_s_per_gpu_default x GPUs ({RULES_FILE}, "
            "Llama 3 Sec. 3.3.1)"
        )
    link = host_link(cluster.gpu.name)
    price_from = None
    if price is not None:
        price_from = "--gpu-hour-price"
    elif given.gpu_hour_price is not None:
        price, price_from = given.gpu_hour_price, "cluster file (gpu_hour_price)"
    figures = {"mtbf_gpu_hours": (mtbf, mtbf_from), "storage_gb_per_s": (storage / GIGA,
               storage_from), "gpu_hour_price": (price, price_from)}  # fmt: skip
    for key, (value, origin) in figures.items():
        problem = None if origin is None else budget_figure_problem(key, value)
        if problem:  # a figure from a rule overlay, or BudgetInputs built around the checks
            raise InputError(f"{key} ({origin}): {problem}")
    values = {
        "budget.tokens": tokens,
        "budget.mtbf_gpu_hours": mtbf,
        "budget.storage_bytes_per_s": storage,
        "budget.gpu_hour_price": price or 0.0,
        "budget.host_bytes_per_s": host_bytes_per_s(cluster.gpu.name),
    }
    host_from = None if link is None else link.source
    return values, {
        "mtbf": mtbf_from,
        "storage": storage_from,
        "price": price_from,
        "host": host_from,
    }


def request_tokens(tokens: object) -> float:
    """`plan(tokens=...)` / `--tokens` as a count of tokens (`15T`, 2e12), or an InputError
    that names the argument."""
    try:
        return token_count(tokens)
    except ValueError as exc:
        raise InputError(f"tokens: {exc}") from None


def check_budget_request(tokens: object, gpu_hour_price: object) -> None:
    """`plan()`'s budget arguments, checked before any search (as the flags are): an
    InputError names the argument that is wrong."""
    if tokens is not None:
        request_tokens(tokens)
    problem = (
        None if gpu_hour_price is None else budget_figure_problem("gpu_hour_price", gpu_hour_price)
    )
    if problem:
        raise InputError(f"gpu_hour_price: {problem}")


def _formula(rules: RuleSet, name: str) -> Callable[[Any], object]:
    where = SourceRef(f"budget formula {name}")
    return rules.library.compile(name, where, "budget").evaluate


def compute_budget(
    rules: RuleSet,
    spec: TrainedModel,
    cluster: Cluster,
    chosen: Estimate,
    *,
    tokens: float,
    price: float | None = None,
    inputs: BudgetInputs | None = None,
    flash_attention: bool = True,
) -> Budget:
    """The budget of training `tokens` on the chosen plan (rules/budget/budget.yaml), with the
    site's budget `inputs` (None: the rules' defaults) and `price` (`--gpu-hour-price`, before
    the inputs' price)."""
    if transformer_of(spec) is None:
        raise InputError(f"--tokens: {spec.name} is not a transformer; it trains no tokens")
    backend = chosen.backend.name if chosen.backend else None
    evaluator = Evaluator(rules, spec.kind, backend)
    env = evaluator.env(spec, cluster, chosen.plan, flash_attention=flash_attention)
    env.update(estimate_env(evaluator.cost.figures(env)))  # the budget rules read estimate.*
    values, sources = budget_values(rules, cluster, inputs, tokens, price)
    env.update(values)

    def get(name: str) -> float:
        return float(_formula(rules, name)(env))  # type: ignore[arg-type]

    if get("budget_progress") <= 0:
        raise InputError(
            f"--tokens: on {cluster.num_gpus} GPUs the job is expected to fail every "
            f"{get('budget_job_mtbf_s') / HOUR_S:.2f} h, faster than it can checkpoint "
            f"({get('budget_checkpoint_write_s'):.0f} s per checkpoint): it never finishes "
            f"({RULES_FILE}, budget_progress)"
        )
    priced = sources["price"] is not None
    linked = sources["host"] is not None
    is_async = bool(_formula(rules, "budget_checkpoint_async")(env))
    backend_async = bool(_formula(rules, "budget_checkpoint_async_backend")(env))
    return Budget(
        tokens=tokens,
        tokens_per_step=get("budget_tokens_per_step"),
        steps=round(get("budget_steps")),
        step_s=chosen.time.step_s,
        compute_days=get("budget_compute_s") / DAY_S,
        checkpoint_bytes=get("budget_checkpoint_bytes"),
        storage_bytes_per_s=values["budget.storage_bytes_per_s"],
        storage_source=sources["storage"] or "",
        checkpoint_write_s=get("budget_checkpoint_write_s"),
        checkpoint_interval_s=get("budget_checkpoint_interval_s"),
        checkpoints=get("budget_checkpoints"),
        mtbf_gpu_hours=values["budget.mtbf_gpu_hours"],
        mtbf_source=sources["mtbf"] or "",
        job_mtbf_hours=get("budget_job_mtbf_s") / HOUR_S,
        interruptions=get("budget_interruptions"),
        checkpoint_days=get("budget_checkpoint_s") / DAY_S,
        lost_days=get("budget_lost_s") / DAY_S,
        wall_days=get("budget_wall_s") / DAY_S,
        compute_gpu_hours=get("budget_compute_gpu_hours"),
        gpu_hours=get("budget_gpu_hours"),
        gpu_hour_price=values["budget.gpu_hour_price"] if priced else None,
        price_source=sources["price"],
        cost=get("budget_cost") if priced else None,
        checkpoint_async=is_async,
        checkpoint_blocking_s=get("budget_checkpoint_blocking_s"),
        host_bytes_per_s=values["budget.host_bytes_per_s"] if linked else None,
        host_source=sources["host"],
        restart_s=get("budget_restart_s"),
        checkpoint_floor_s=get("budget_checkpoint_min_interval_s"),
        checkpoint_mode=checkpoint_mode(
            backend, cluster, sources["host"], asynchronous=is_async, backend_async=backend_async
        ),
    )


# How each backend writes a checkpoint in the background (rules/budget/budget.yaml
# budget_checkpoint_async_backend names the sources; templates/mapping.yaml renders the flags).
ASYNC_FLAGS = {
    "megatron": "Megatron-LM --async-save --use-persistent-ckpt-worker --ckpt-format torch_dist",
    "torchtitan": "torchtitan --checkpoint.async_mode async",
}


def checkpoint_mode(
    backend: str | None,
    cluster: Cluster,
    host_source: str | None,
    *,
    asynchronous: bool,
    backend_async: bool,
) -> str:
    """One sentence: which checkpointing the budget priced (`asynchronous`: the rule
    budget_checkpoint_async), and why (`backend_async`: budget_checkpoint_async_backend, the
    backend and layout can write in the background; `host_source`: where the GPU's host-link
    figure comes from, None: no figure)."""
    if asynchronous:
        flags = ASYNC_FLAGS.get(backend or "", backend or "the backend's asynchronous save")
        return (
            f"asynchronous ({flags}): training waits only for the copy to host "
            f"memory over the GPU's host link ({host_source or '-'}); the write to "
            "storage runs in the background"
        )
    if not backend_async and backend == "megatron":
        return (
            "blocking: Megatron-FSDP saves --ckpt-format fsdp_dtensor, which --async-save does "
            f"not run ({RULES_FILE})"
        )
    if not backend_async:
        name = backend or "this plan's backend"
        return f"blocking: {name} has no asynchronous checkpoint write ({RULES_FILE})"
    return (
        f"blocking: no host link figure for {cluster.gpu.name} (parplan_gen/data/host_links.yaml)"
        ", so no asynchronous copy is priced"
    )


COUNT_ENUMERATION = (
    "whole nodes: 1, 2, 4, ... nodes (doubling) until one count's best plan meets the deadline, "
    "then bisection between the last count that did not and it (assumes more nodes are never "
    "slower)"
)
# Among the counts tried that meet the deadline (the doubling's last count always does): the
# cost is GPUs x wall-clock days, which is not monotone in the count (a count whose factors
# force an awkward layout, 7 x 128 GPUs with pp 7, runs slower per GPU than a power of two), so
# the smallest count is not always the cheapest.
COUNT_CHOICE = {
    "cheapest": "the cheapest count tried that meets it (fewer GPUs on a tie)",
    "smallest": "the smallest count found that meets it (no price given)",
}


class CountOutcome(NamedTuple):
    """What one GPU count gives the deadline search: its best plan's wall-clock days and cost,
    or why it has no plan."""

    wall_days: float | None  # None: no plan runs and fits
    cost: float | None  # None: no price, or no plan
    failure: str | None  # why no plan (None: one fits)


def count_for_deadline(outcome: Callable[[int], CountOutcome], node: int, days: float) -> Deadline:
    """A multiple of `node` GPUs whose best plan trains within `days`: the counts are
    enumerated by COUNT_ENUMERATION and chosen by COUNT_CHOICE (the cheapest when every count
    that meets it is priced, else the smallest); `outcome(gpus)` evaluates one count."""
    tried: dict[int, CountOutcome] = {}

    def meets(nodes: int) -> bool:
        gpus = nodes * node
        if gpus not in tried:
            tried[gpus] = outcome(gpus)
        found = tried[gpus].wall_days
        return found is not None and found <= days

    low, high = 0, 1
    while not meets(high):
        low, high = high, high * 2
        if high * node > MAX_GPUS:
            return _deadline(days, tried)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if meets(middle) else (middle, high)
    return _deadline(days, tried)


def _deadline(days: float, tried: dict[int, CountOutcome]) -> Deadline:
    counts = sorted(tried)
    meeting = [g for g in counts if (w := tried[g].wall_days) is not None and w <= days]
    costs = {g: c for g in counts if (c := tried[g].cost) is not None}
    priced = bool(meeting) and all(g in costs for g in meeting)
    chosen = min(meeting, key=lambda g: (costs[g], g)) if priced else min(meeting, default=None)
    fastest = min(meeting, key=lambda g: (tried[g].wall_days or 0.0, g), default=None)
    choice: Literal["smallest", "cheapest"] = "cheapest" if priced else "smallest"
    return Deadline(
        days=days,
        gpus=chosen,
        tried={str(g): tried[g].wall_days for g in counts},
        enumeration=f"{COUNT_ENUMERATION}; {COUNT_CHOICE[choice]}",
        choice=choice,
        fastest=fastest,
        costs={str(g): c for g, c in costs.items()},
        failures={str(g): f for g in counts if (f := tried[g].failure) is not None},
    )


def scaled(cluster: Cluster, gpus: int) -> Cluster:
    """`cluster` with `gpus` GPUs (a flag-made cluster's name follows the count)."""
    name = cluster.name
    if name == FLAG_CLUSTER_NAME.format(gpus=cluster.num_gpus, gpu=cluster.gpu.name):
        name = FLAG_CLUSTER_NAME.format(gpus=gpus, gpu=cluster.gpu.name)
    return Cluster.model_validate({**cluster.model_dump(), "num_gpus": gpus, "name": name})
