"""Readable view of one estimate: memory stacked against capacity, time by part, throughput."""

from __future__ import annotations

from collections.abc import Sequence

from parplan_gen.cost.estimate import MEMORY_PARTS, Estimate
from parplan_gen.cost.hardware import Cluster
from parplan_gen.cost.layout import (
    DEFAULT_FSDP_RESHARD,
    DS_SETTINGS,
    PLAN_CROSS_ENTROPY_FUSION,
    plan_loss_compiled,
)
from parplan_gen.cost.mfu_convention import convention_of, mfu_text
from parplan_gen.inputs.defaults import DS_DEFAULTS, GIB
from parplan_gen.inputs.safe_text import printable
from parplan_gen.models.kind import TrainedModel
from parplan_gen.planning.constraints import Violation
from parplan_gen.planning.sanity import sanity_warnings

BAR = 40  # characters for the whole capacity
MAX_BAR = 3 * BAR  # a longer bar is cut and ends with ">" (a tiny GPU must not print megabytes)
HOST_WAIT_LABEL = "  of it, waiting for host launches"  # time.host_wait_s, within compute
TIME_LABELS = {
    "compute_s": "compute",
    "overlap_cost_s": "compute slowed by hidden comm",
    "tp_comm_s": "tensor-parallel comm",
    "cp_comm_s": "context-parallel comm",
    "pp_comm_s": "pipeline p2p",
    "dp_comm_s": "data-parallel comm (before overlap)",
    "ep_comm_s": "expert all-to-all",
    "bn_comm_s": "SyncBatchNorm statistics",
    "offload_s": "activation offload (exposed)",
    "bubble_s": "pipeline bubble",
    "optimizer_s": "optimizer step",
}


def measured_lines(cluster: Cluster) -> list[str]:
    """The line that says a profiled cluster's GEMMs (and SDPA attention, collectives and the
    CUDA context's memory, where measured) are priced from its own measurement (none for a
    catalog cluster)."""
    m = cluster.measured
    if m is None:
        return []
    parts = ["GEMMs"] + ["SDPA attention"] * bool(m.attention_max_fraction)
    parts += ["collectives"] * bool(m.intra_bus_bytes_per_s or m.inter_bus_bytes_per_s)
    parts += ["the CUDA context's memory"] * bool(m.context_bytes)
    what = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
    return [
        f"priced from measured curves ({what}): parplan profile of {printable(m.gpu_name)} on "
        f"{m.date} (torch {printable(m.torch)}; cluster file `measured:`, docs/clusters.md)"
    ]


def batch_text(spec: TrainedModel, estimate: Estimate) -> str:
    """`global batch 512 x 8192 tokens`, or `global batch 4096 samples` for a graph model."""
    return spec.batch_text(estimate.plan.global_batch, estimate.plan.seq_len)


def backend_text(estimate: Estimate) -> str:
    """`megatron core_v0.16`: the backend that runs the layout and its release."""
    ref = estimate.backend
    return "backend not named" if ref is None else f"{ref.name} {ref.version}"


def layout_line(estimate: Estimate, against: Estimate | None = None) -> str:
    """`tp=8 pp=12 dp=16 ...` for the non-default parts of a layout (the precision when it is
    not bf16, the gradients' reduce type when it is not the backend's own, the loss kernel and
    the loss's compile when they are not the plans' or differ from those of `against`, the
    layout it is set beside)."""
    p = estimate.plan
    parts = [f"dp={p.dp}", f"tp={p.tp}", f"pp={p.pp}"]
    parts += [f"{k}={v}" for k, v in (("cp", p.cp), ("ep", p.ep)) if v > 1]
    parts += [f"etp={p.etp}"] if p.etp != p.tp else []  # experts' own tensor parallelism
    parts += [f"vpp={p.vpp}"] if p.vpp > 1 else []
    parts += [f"mbs={p.mbs}", f"grad_accum={p.grad_accum}", f"recompute={p.recompute}"]
    if p.zero_stage:
        parts.append(f"zero={p.zero_stage}")
    if p.distributed_optimizer:
        parts.append("distributed_optimizer")
    if p.sequence_parallel:
        parts.append("sequence_parallel")
    if p.precision != "bf16":
        parts.append(f"precision={p.precision}")
    if p.grad_reduce_dtype != "default":  # the backend's own type is not shown
        parts.append(f"grad_reduce={p.grad_reduce_dtype}")
    if p.fp8_param_gather:
        parts.append("fp8_param_gather")
    if p.precision_aware_optimizer:
        parts.append("precision_aware_optimizer")
    if p.offload_layers:
        parts.append(f"offload_layers={p.offload_layers}")
    if p.fsdp_reshard != DEFAULT_FSDP_RESHARD:
        parts.append(f"fsdp_reshard={p.fsdp_reshard}")
    if not p.overlap_grad_reduce:
        parts.append("overlap_grad_reduce=off")
    # DeepSpeed ZeRO-3's buffers where they are not DeepSpeed's defaults
    parts += [f"{f}={getattr(p, f)}" for f in DS_SETTINGS if getattr(p, f) != DS_DEFAULTS[f]]
    loss = p.cross_entropy_fusion  # the plans' kernel is not shown, but where the two differ
    differs = against is not None and loss != against.plan.cross_entropy_fusion
    if loss is not None and (loss != PLAN_CROSS_ENTROPY_FUSION or differs):
        parts.append(f"cross_entropy={loss}")
    compiled = p.loss_compiled  # likewise the loss's compile (torchtitan's plans compile it)
    differs = against is not None and compiled != against.plan.loss_compiled
    backend = estimate.backend.name if estimate.backend is not None else None
    if compiled is not None and (compiled != plan_loss_compiled(backend) or differs):
        parts.append(f"loss_compiled={'on' if compiled else 'off'}")
    return " ".join(parts)


def memory_lines(estimate: Estimate, cluster: Cluster | None = None) -> list[str]:
    """Memory per GPU by part, as GiB and a bar scaled to the capacity; the offloaded
    activations' pinned host memory beside them, against the host's per GPU where `cluster`
    knows it (Cluster.host_memory_per_gpu)."""
    m = estimate.memory
    lines = []
    for part in MEMORY_PARTS:
        value = getattr(m, part)
        length = round(BAR * value / m.capacity) if m.capacity else 0
        bar = "#" * length if length <= MAX_BAR else "#" * MAX_BAR + ">"
        lines.append(f"  {part:<12} {value / GIB:8.2f} GiB  {bar}")
    free = (m.capacity - m.total) / GIB
    if m.fits:
        kept = f" (headroom {m.kept_free / GIB:.2f} GiB)" if m.kept_free else ""
        verdict = f"fits, {free:.2f} GiB free{kept}"
    elif m.total > m.capacity:
        verdict = f"DOES NOT FIT by {-free:.2f} GiB"
    elif shortfall := m.shortfall():
        verdict = f"DOES NOT FIT: {shortfall}"
    else:  # an overlay's memory rule asks for more headroom
        verdict = f"DOES NOT FIT the memory rules, {free:.2f} GiB free"
    lines.append(f"  {'total':<12} {m.total / GIB:8.2f} GiB of {m.capacity / GIB:.2f}: {verdict}")
    if m.host_offload:
        host = 0.0 if cluster is None else cluster.host_memory_per_gpu
        of = f", of {host / GIB:.2f} GiB host memory per GPU" if host else ""
        lines.append(
            f"  {'host':<12} {m.host_offload / GIB:8.2f} GiB pinned for offloaded activations"
            f"{of} (not in the total)"
        )
    return lines


def time_lines(estimate: Estimate, spec: TrainedModel) -> list[str]:
    """Time per step by the parts `spec`'s kind of model has, with each part's share."""
    t = estimate.time
    lines = []
    for key in spec.time_parts:
        label, value = TIME_LABELS[key], getattr(t, key)
        share = value / t.step_s if t.step_s else 0.0
        lines.append(f"  {label:<36} {value:10.4f} s  {share:6.1%}")
        if key == "compute_s" and t.host_wait_s:
            wait = t.host_wait_s / t.step_s if t.step_s else 0.0
            lines.append(f"  {HOST_WAIT_LABEL:<36} {t.host_wait_s:10.4f} s  {wait:6.1%}")
    lines.append(f"  {'step':<36} {t.step_s:10.4f} s")
    return lines


def estimate_text(
    spec: TrainedModel,
    cluster: Cluster,
    estimate: Estimate,
    violations: Sequence[Violation] = (),
) -> str:
    """The whole human view of `parplan estimate`: the estimate, the rules it breaks (none:
    no lines) and the sanity warnings."""
    th = estimate.throughput
    head = (
        f"{spec.title} on {cluster.num_gpus} x "
        f"{printable(cluster.gpu.name)} ({cluster.num_nodes} node{'s' if cluster.num_nodes > 1 else ''})\n"
        + "".join(f"{line}\n" for line in measured_lines(cluster))
        + f"backend: {backend_text(estimate)}\n"
        f"layout: {layout_line(estimate)}, {batch_text(spec, estimate)}\n"
    )
    rates = (
        f"  {spec.unit}/s {th.tokens_per_s:,.0f}   model TFLOP/s per GPU "
        f"{convention_of(estimate).model_tflops(th):.1f}"
        f"   hardware TFLOP/s per GPU {th.hardware_tflops_per_gpu:.1f}"
        f"   MFU {mfu_text(estimate)}"
    )
    body = [
        "",
        spec.memory_heading,
        *memory_lines(estimate, cluster),
        "",
        "Time per step",
        *time_lines(estimate, spec),
        "",
        "Throughput",
        rates,
        *(["", *violation_lines(violations)] if violations else []),
        *warning_lines(sanity_warnings(spec, cluster, estimate)),
    ]
    return head + "\n".join(body) + "\n"


def warning_lines(warnings: list[str]) -> list[str]:
    """The sanity warnings (planning.sanity) as a block of the text views; none: no lines."""
    if not warnings:
        return []
    return [
        "",
        "Sanity warnings (not errors):",
        *(f"  ! {printable(w, limit=len(w))}" for w in warnings),
    ]


def violation_lines(violations: Sequence[Violation]) -> list[str]:
    """`Constraints broken:` and each rule a layout breaks, `reason [rule id, severity]` (a
    rule's reason may quote user text: one line, escaped); none: `Constraints: all met`."""
    if not violations:
        return ["Constraints: all met"]
    described = [v.describe() for v in violations]
    return ["Constraints broken:", *(f"  - {printable(d, len(d))}" for d in described)]
