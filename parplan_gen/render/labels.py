"""How plan.md, the charts and `parplan compare` name a layout and show a figure: one label per
layout (`megatron tp8 pp2 dp4 vpp4 mbs2 sp distopt`) and the GiB / seconds formats."""

from __future__ import annotations

from collections.abc import Sequence

from parplan_gen.cost.estimate import Estimate
from parplan_gen.inputs.defaults import GIB

MS_PER_S = 1000


def gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:,.1f} GiB"


def seconds(value: float) -> str:
    return f"{value:,.2f} s" if abs(value) >= 1 else f"{value * MS_PER_S:,.1f} ms"


def layout_labels(estimates: Sequence[Estimate]) -> list[str]:
    """`megatron tp8 pp2 dp4`, then what is not the default (cp, ep, vpp above 1, mbs above 1
    or where the layouts differ in it, a ZeRO stage, recompute, sequence parallel, the
    distributed optimizer); a label that would repeat gets ` (2)`, ` (3)`."""
    mbs_differ = len({e.plan.mbs for e in estimates}) > 1
    labels: list[str] = []
    for e in estimates:
        p = e.plan
        words = [e.backend.name if e.backend else "layout", f"tp{p.tp}", f"pp{p.pp}", f"dp{p.dp}"]
        words += [f"{k}{v}" for k, v in (("cp", p.cp), ("ep", p.ep), ("vpp", p.vpp)) if v > 1]
        words += [f"mbs{p.mbs}"] if p.mbs > 1 or mbs_differ else []
        words += [f"zero{p.zero_stage}"] if p.zero_stage else []
        words += [f"recompute-{p.recompute}"] if p.recompute != "none" else []
        words += ["sp"] if p.sequence_parallel else []
        words += ["distopt"] if p.distributed_optimizer else []
        label = " ".join(words)
        count = sum(1 for seen in labels if seen.split(" (")[0] == label)
        labels.append(label if not count else f"{label} ({count + 1})")
    return labels
