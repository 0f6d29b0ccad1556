"""How plan.md, the charts and `parplan compare` name a layout and show a figure: one label per
layout (`megatron tp8 pp2 dp4 vpp4 mbs2 sp distopt`, naming only the sizes the model kind is
laid out over) and the GiB / seconds formats."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from parplan_gen.cost.estimate import Estimate
from parplan_gen.inputs.defaults import GIB

MS_PER_S = 1000


def gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:,.1f} GiB"


def seconds(value: float) -> str:
    return f"{value:,.2f} s" if abs(value) >= 1 else f"{value * MS_PER_S:,.1f} ms"


def layout_labels(estimates: Sequence[Estimate], dims: Collection[str]) -> list[str]:
    """`megatron tp8 pp2 dp4`, then what is not the default (cp, ep, vpp above 1, mbs above 1
    or where the layouts differ in it, a ZeRO stage, recompute, sequence parallel, the
    distributed optimizer, the layers offloaded, the gradient reduction not overlapped); a label that would repeat gets ` (2)`, ` (3)`. Only the model
    kind's layout dimensions `dims` (`TrainedModel.layout_dims`) are named: an op-graph model,
    laid out over dp and tp, is `deepspeed tp1 dp16`, never `pp1`."""
    mbs_differ = len({e.plan.mbs for e in estimates}) > 1
    labels: list[str] = []
    for e in estimates:
        p = e.plan
        sizes = (("tp", p.tp), ("pp", p.pp), ("dp", p.dp))
        words: list[str] = [e.backend.name if e.backend else "layout"]
        words += [f"{k}{v}" for k, v in sizes if k in dims]
        extra = (("cp", p.cp), ("ep", p.ep), ("vpp", p.vpp))
        words += [f"{k}{v}" for k, v in extra if v > 1 and k in dims]
        words += [f"mbs{p.mbs}"] if p.mbs > 1 or mbs_differ else []
        words += [f"zero{p.zero_stage}"] if p.zero_stage else []
        words += [f"recompute-{p.recompute}"] if p.recompute != "none" else []
        words += ["sp"] if p.sequence_parallel and "sp" in dims else []
        words += ["distopt"] if p.distributed_optimizer else []
        words += [f"offload{p.offload_layers}"] if p.offload_layers else []
        words += ["no-overlap"] if not p.overlap_grad_reduce else []
        label = " ".join(words)
        count = sum(1 for seen in labels if seen.split(" (")[0] == label)
        labels.append(label if not count else f"{label} ({count + 1})")
    return labels
