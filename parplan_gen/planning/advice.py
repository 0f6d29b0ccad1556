"""Advice for a request that nothing fits: each piece is one change to the closest candidate
on its backend (ZeRO-3, full recomputation, micro-batch 1, sequence parallelism), re-estimated,
then the first multiple of the GPUs at which a plan fits. The closest candidate meets every pin
and bound of the request (the search never leaves them); a change that a pin or bound excludes
says which flag it relaxes."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from parplan_gen.cost.estimate import Estimate
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.layout import MAX_GPUS, Layout
from parplan_gen.inputs.defaults import GIB
from parplan_gen.planning.evaluate import CAPABILITY_RULE
from parplan_gen.planning.pins import flag
from parplan_gen.planning.planner import BackendPlanner, PlanError, Planner, SearchResult
from parplan_gen.planning.search_space import Request

ADVICE_GPU_TRIES = 3  # "more GPUs": multiples tried, doubling from the memory ratio up


class Advice(BaseModel):
    """What would make an infeasible request fit, measured by re-estimating one change."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    change: str
    fits: bool
    memory_total: int | None  # bytes per GPU after the change; None when it cannot run
    note: str


def advise(planner: Planner, request: Request, result: SearchResult) -> list[Advice]:
    """For an infeasible result: each single change to the closest candidate on its backend,
    re-estimated, then the first multiple of the GPUs at which a plan fits."""
    closest = result.chosen.plan
    name = result.chosen.backend.name if result.chosen.backend else request.options.backends[0]
    on_backend = planner.on(name)
    changes: list[tuple[str, dict[str, Any]]] = [
        ("ZeRO-3", {"zero_stage": 3, "distributed_optimizer": False}),
        ("full recomputation", {"recompute": "full"}),
        ("micro-batch 1", {"mbs": 1, "grad_accum": closest.global_batch // closest.dp}),
        ("sequence parallelism", {"sequence_parallel": True}),
    ]
    advice = []
    no_sp = closest.tp == 1 or not request.options.sequence_parallel
    allows = request.options.limits.allows
    for label, change in changes:
        current = {k: getattr(closest, k) for k in change}
        if current != change and not (label == "sequence parallelism" and no_sp):
            relaxed = [flag(k) for k, v in change.items() if not allows(k, v)]
            shown = f"{label} (relaxes {', '.join(relaxed)})" if relaxed else label
            advice.append(_try_change(on_backend, request, closest, shown, change))
    return [*advice, _more_gpus(planner, request, result.chosen)]


def _try_change(
    planner: BackendPlanner, request: Request, closest: Layout, label: str, change: dict[str, Any]
) -> Advice:
    try:
        layout = Layout(**{**closest.model_dump(), **change})
    except ValidationError as exc:
        reason = exc.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
        return Advice(change=label, fits=False, memory_total=None, note=f"{label}: {reason}")
    found = planner.evaluator.evaluate(
        request.spec,
        request.cluster,
        layout,
        flash_attention=request.flash_attention,
        memory_headroom=request.memory_headroom,
    )
    # A change the planner would not choose (an `invalid` or a `reject` rule) is no advice.
    layout_rules = {c.rule.id for c in planner.constraints.layout} | {CAPABILITY_RULE}
    broken = [v for v in found.violations if v.rule_id in layout_rules]
    if broken:
        note = f"{label}: not possible with this layout ({broken[0].reason})"
        return Advice(change=label, fits=False, memory_total=None, note=note)
    fits = not found.violations
    memory = found.estimate.memory
    total, capacity = memory.total, memory.capacity
    if fits:
        verdict = "fits"
    elif shortfall := memory.shortfall():
        verdict = f"still {shortfall}"
    else:
        verdict = f"still breaks {found.violations[0].rule_id}"
    note = f"{label}: {total / GIB:.1f} GiB per GPU of {capacity / GIB:.1f} GiB, {verdict}"
    return Advice(change=label, fits=fits, memory_total=round(total), note=note)


def _more_gpus(planner: Planner, request: Request, closest: Estimate) -> Advice:
    """Re-plan on more GPUs: the closest candidate's memory over capacity, rounded up to a
    power of two, is the first multiple tried, then ADVICE_GPU_TRIES - 1 doublings."""
    world = request.cluster.num_gpus
    ratio = closest.memory.needed / closest.memory.capacity
    factor = 1 << max(1, math.ceil(ratio) - 1).bit_length()
    for _ in range(ADVICE_GPU_TRIES):
        if world * factor > MAX_GPUS:
            note = f"more GPUs: over {MAX_GPUS} would be needed (the most parplan plans for)"
            return Advice(change="more GPUs", fits=False, memory_total=None, note=note)
        data = {**request.cluster.model_dump(), "num_gpus": world * factor}
        try:
            bigger = Cluster.model_validate({**data, "name": f"{request.cluster.name}x{factor}"})
            found = planner.plan(replace(request, cluster=bigger, top=1))
        except (ValidationError, PlanError):
            found = None
        if found is not None and found.feasible:
            p = found.chosen.plan
            note = (
                f"{world * factor} GPUs: dp={p.dp} tp={p.tp} pp={p.pp} fits with "
                f"{found.chosen.memory.total / GIB:.1f} GiB per GPU"
            )
            return Advice(
                change=f"{world * factor} GPUs",
                fits=True,
                memory_total=found.chosen.memory.total,
                note=note,
            )
        factor *= 2
    note = f"more GPUs: nothing fits even on {world * factor // 2} GPUs at this batch size"
    return Advice(change="more GPUs", fits=False, memory_total=None, note=note)
