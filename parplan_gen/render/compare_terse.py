"""The terse view of a comparison (`parplan compare` without --verbose): for the first layout
against another, one line on the step, then one line per term that decides the gap, with the
layout fields that make it differ.

A time part is said when what the step waits for of it (tp_comm_s and dp_comm_s: their exposed
parts) differs by at least templates/report/compare.yaml `material.share` of the step gap; a
memory part when it differs by that share of the gap in memory per GPU, and memory in all
whenever it differs (as shown). The time parts come first, the largest difference first, then
memory in all and the memory parts. The line templates, the share and its reason are compare.yaml's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parplan_gen.cost.estimate import EXPOSED_PARTS, Estimate
from parplan_gen.cost.hardware import Cluster
from parplan_gen.render.compare_terms import (
    Column,
    CompareFile,
    Row,
    Term,
    Terse,
    differing,
    plan_fields,
    saving,
    shown,
    tp_link,
    word,
)
from parplan_gen.render.labels import gib

SKIPPED = ("step_s", "overlap_s", "capacity")  # the step line says the step; the rest follows


def terse_lines(
    spec: CompareFile,
    cluster: Cluster,
    a: Column,
    b: Column,
    index: int,
    said: Sequence[tuple[Term, Row]],
) -> Terse:
    """`a` (the first column) against `b` (column `index`): the step line and the lines of the
    material terms among the rows `said` (compare.py: every row but the other MFU count)."""
    ea, eb = a.estimate, b.estimate
    found: list[tuple[int, float, str, str]] = []  # (order, -difference, term, line)
    time_gap = abs(ea.time.step_s - eb.time.step_s)
    memory_gap = abs(ea.memory.total - eb.memory.total)
    share = spec.material.share
    for t, row in said:
        if t.term in SKIPPED or t.group == "throughput":
            continue
        label, va, vb = _figures(spec, t, row, index, ea, eb)
        if shown(t.term, t.group, va) == shown(t.term, t.group, vb):
            continue
        gap = time_gap if t.group == "time" else memory_gap
        if not gap or (t.term != "total" and abs(va - vb) < share * gap):
            continue
        line = _line(spec, cluster, t, label, va, vb, a, b)
        order = 0 if t.group == "time" else 1 if t.term == "total" else 2
        found.append((order, -abs(va - vb), t.term, line))
    found.sort(key=lambda f: f[:2])
    return Terse(
        _step(spec, a, b),
        tuple(f[2] for f in found),
        tuple(f[3] for f in found) or (spec.terse["none"].format(share=f"{share:.0%}"),),
    )


def _figures(
    spec: CompareFile, t: Term, row: Row, index: int, ea: Estimate, eb: Estimate
) -> tuple[str, float, float]:
    """The row's label and the two values the line compares: a communication part's exposed
    share where both estimates carry it (what the step waits for), else the row's values."""
    exposed = EXPOSED_PARTS.get(t.term)
    xa = getattr(ea.time, exposed) if exposed else None
    xb = getattr(eb.time, exposed) if exposed else None
    if exposed and xa is not None and xb is not None:
        return spec.terse["exposed"].format(label=t.label), float(xa), float(xb)
    return t.label, row.values[0], row.values[index]


def _step(spec: CompareFile, a: Column, b: Column) -> str:
    """The step line: by how much the first is faster (or slower), or that they are the same."""
    va, vb = a.estimate.time.step_s, b.estimate.time.step_s
    fields: dict[str, Any] = {
        "a": a.key,
        "b": b.key,
        "a_value": shown("step_s", "time", va),
        "b_value": shown("step_s", "time", vb),
        "delta": shown("", "time", abs(va - vb)),
        "saving": saving(va, vb),
        "b_problem": spec.terse["b_problem"].format(b=b.key) if b.problem else "",
    }
    if fields["a_value"] == fields["b_value"]:
        return spec.terse["step_same"].format_map(fields)
    return spec.terse["step_low" if va < vb else "step_high"].format_map(fields)


def _line(
    spec: CompareFile,
    cluster: Cluster,
    t: Term,
    label: str,
    va: float,
    vb: float,
    a: Column,
    b: Column,
) -> str:
    """One material term: by how much, the two values and the drivers that differ."""
    pa, pb = plan_fields(a), plan_fields(b)
    names = differing(t.drivers, pa, pb)
    drivers = ", ".join(_driver(spec, cluster, name, pa, pb) for name in names)
    fits = t.term == "total" and a.estimate.memory.fits and va > vb
    fields = {
        "label": label,
        "delta": shown("", t.group, abs(va - vb)),
        "a_value": shown(t.term, t.group, va),
        "b_value": shown(t.term, t.group, vb),
        "because": spec.terse["because"].format(drivers=drivers) if drivers else "",
        "fits": spec.terse["still_fits"].format(capacity=gib(a.estimate.memory.capacity))
        if fits
        else "",
    }
    return spec.terse[f"{t.group}_{'low' if va < vb else 'high'}"].format_map(fields)


def _driver(
    spec: CompareFile, cluster: Cluster, name: str, pa: dict[str, Any], pb: dict[str, Any]
) -> str:
    """`micro-batch 2 vs 4`; tp with its link where the two layouts' links differ."""
    left, right = word(pa[name]), word(pb[name])
    if name == "tp":
        here, there = tp_link(cluster, pa["tp"]), tp_link(cluster, pb["tp"])
        if here != there:
            left, right = f"{left} ({here})", f"{right} ({there})"
    return spec.terse["driver"].format(name=spec.names[name], a=left, b=right)
