"""The numbers of plan.md and its two SVG charts, computed and formatted here.

`report_context` gives the report template ready-made strings (tables, headline figures) and
the charts' geometry (every x, y, width already computed), so the templates only place them.
Every text that comes from an input (the model's title, rule reasons and descriptions, sources
named in a cluster file) passes `safe_text.markdown` here, the one
escaping of plan.md: no raw HTML, image, link, code span or control character reaches it.
Chart style (sizes, colours) comes from templates/mapping.yaml `report:`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from parplan_gen.cost.estimate import MEMORY_PARTS, Estimate
from parplan_gen.cost.mfu_convention import MfuConvention, convention_of, mfu_text
from parplan_gen.inputs.safe_text import markdown
from parplan_gen.planning.document import PlanDocument
from parplan_gen.render.charts import PART_LABELS, chart_rows, time_chart
from parplan_gen.render.compare import why_context
from parplan_gen.render.labels import gib, seconds
from parplan_gen.render.mapping_schema import ReportMapping
from parplan_gen.render.memory_chart import memory_chart
from parplan_gen.render.report_rows import budget_rows, search_rows


def report_context(
    doc: PlanDocument,
    report: ReportMapping,
    notes: Iterable[str],
    script_notes: Iterable[str],
) -> dict[str, Any]:
    """Everything plan.md shows, as strings, plus the two charts.

    The time parts are those the model's kind has (its `time_parts`); throughput
    counts tokens for a transformer and samples for an op-graph model. `script_notes`: what
    the training script must do (an op-graph model's plan)."""
    chosen = doc.chosen
    kind, time_parts, unit = doc.model.kind, doc.model.time_parts, doc.model.unit
    rows = chart_rows(doc, report.chart_rows)
    return {
        "kind": kind,
        "model_title": markdown(doc.model.title),
        "unit": unit,
        "headline": _headline(chosen),
        "layout": _layout_rows(chosen, unit),
        "why": why_context(doc),  # render/compare.py: the chosen plan against the runner-up
        "advice": [markdown(a) for a in doc.advice],
        "warnings": [markdown(w) for w in doc.warnings],
        "notes": [md(n) for n in notes],
        "script_notes": [md(n) for n in script_notes],
        "memory": _part_rows(chosen.memory.model_dump(), MEMORY_PARTS, gib),
        "memory_total": gib(chosen.memory.total),
        "memory_kept_free": gib(kept) if (kept := doc.kept_free(chosen)) else "",
        "memory_capacity": gib(chosen.memory.capacity),
        "memory_host": gib(chosen.memory.host_offload) if chosen.memory.host_offload else "",
        "host_memory": gib(doc.cluster.host_memory_per_gpu)
        if doc.cluster.host_memory_per_gpu
        else "",
        "time": _part_rows(chosen.time.model_dump(), time_parts, seconds) + _host_wait(chosen),
        "step": seconds(chosen.time.step_s),
        # the candidates' MFU in the chosen plan's count, so that the rows compare
        "mfu_header": convention_of(chosen).header,
        "candidates": [
            _candidate_row(i, e, e == chosen, convention_of(chosen))
            for i, e in enumerate(doc.candidates)
        ],
        "rejected": [
            {"reason": markdown(reason), "count": str(count)}
            for reason, count in sorted(doc.rejected.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        "search": search_rows(doc),
        "budget": budget_rows(doc),
        "memory_chart": memory_chart(doc, report, rows),
        "time_chart": time_chart(doc, report, rows),
    }


def md(text: str) -> str:
    """Markdown written by parplan or a template (a note with its `code spans`), on one line
    and inside one table cell. Text from an input file goes through `markdown` instead."""
    return " ".join(text.split()).replace("|", "\\|")


def _headline(e: Estimate) -> dict[str, str]:
    """The chosen plan's figures; its MFU and model TFLOP/s in the count its backend logs,
    saying which (cost/mfu_convention.py)."""
    return {
        "step": seconds(e.time.step_s),
        "per_s": f"{e.throughput.tokens_per_s:,.0f}",  # tokens or samples (report `unit`)
        "mfu": mfu_text(e),
        "model_tflops": f"{convention_of(e).model_tflops(e.throughput):,.1f}",
        "memory": f"{gib(e.memory.total)} of {gib(e.memory.capacity)}",
        "fits": "yes" if e.memory.fits else "NO",
    }


def _memory_mode(e: Estimate) -> str:
    p = e.plan
    if p.distributed_optimizer:
        return "distributed optimizer"
    return f"ZeRO-{p.zero_stage}" if p.zero_stage else "none"


def _layout_rows(e: Estimate, unit: str) -> list[list[str]]:
    p = e.plan
    each = f"sequences of {p.seq_len:,} tokens" if unit == "tokens" else unit
    return [
        ["data parallel (dp)", str(p.dp)],
        ["tensor parallel (tp)", str(p.tp)],
        ["pipeline parallel (pp)", str(p.pp)],
        ["virtual stages per rank (vpp)", str(p.vpp)],
        ["context parallel (cp)", str(p.cp)],
        ["expert parallel (ep)", str(p.ep)],
        *([["expert tensor parallel (etp)", str(p.etp)]] if p.etp != p.tp else []),
        ["micro-batch (mbs)", str(p.mbs)],
        ["gradient accumulation", str(p.grad_accum)],
        ["global batch", f"{p.global_batch:,} {each}"],
        ["optimizer sharding", _memory_mode(e)],
        ["sequence parallel", "yes" if p.sequence_parallel else "no"],
        ["activation recompute", p.recompute],
        ["precision", p.precision],
    ]


def _part_rows(values: Mapping[str, float], parts: Iterable[str], fmt: Any) -> list[list[str]]:
    parts = list(parts)
    total = sum(values[p] for p in parts) or 1
    return [[PART_LABELS[p], fmt(values[p]), f"{values[p] / total:.0%}"] for p in parts]


HOST_WAIT_ROW = "of compute, waiting for host launches"  # time.host_wait_s, part of compute


def _host_wait(e: Estimate) -> list[list[str]]:
    """The row under the time parts that says how much of compute the GPU waits for the host's
    kernel launches (Megatron and DeepSpeed MoE layers; time.host_wait_s), where it does."""
    t = e.time
    if not t.host_wait_s:
        return []
    share = t.host_wait_s / t.compute_s if t.compute_s else 0.0
    return [[HOST_WAIT_ROW, seconds(t.host_wait_s), f"{share:.0%} of compute"]]


def _candidate_row(index: int, e: Estimate, chosen: bool, count: MfuConvention) -> list[str]:
    p = e.plan
    return [
        f"{index + 1}{' (chosen)' if chosen else ''}",
        e.backend.name if e.backend else "-",
        *(str(v) for v in (p.dp, p.tp, p.pp, p.vpp, p.cp, p.ep, p.mbs, p.grad_accum)),
        _memory_mode(e),
        "yes" if p.sequence_parallel else "no",
        p.recompute,
        gib(e.memory.total),
        seconds(e.time.step_s),
        f"{e.throughput.tokens_per_s:,.0f}",
        f"{count.mfu(e.throughput):.1%}",
    ]
