"""The numbers of plan.md and its two SVG charts, computed and formatted here.

`report_context` gives the report template ready-made strings (tables, headline figures) and
the charts' geometry (every x, y, width already computed), so the templates only place them.
Chart style (sizes, colours) comes from templates/mapping.yaml `report:`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from parplan_gen.cost.estimate import MEMORY_PARTS, TIME_PARTS, Estimate
from parplan_gen.inputs.defaults import GIB
from parplan_gen.planning.document import PlanDocument
from parplan_gen.render.compare import why_context
from parplan_gen.render.mapping import NOT_RENDERED
from parplan_gen.render.mapping_schema import ChartStyle, ReportMapping

PART_LABELS = {p: p.removesuffix("_s").replace("_", " ") for p in (*MEMORY_PARTS, *TIME_PARTS)}
MS_PER_S = 1000
LEGEND_BOX_EM = 0.9  # legend swatch side, in font sizes
TEXT_BASELINE_EM = 0.35  # shifts text down so it centres on a bar


def report_context(
    doc: PlanDocument,
    report: ReportMapping,
    applied_as: Mapping[str, str],
    notes: Iterable[str],
    script_notes: Iterable[str],
) -> dict[str, Any]:
    """Everything plan.md shows, as strings, plus the two charts.

    The time parts are those the model's kind has (its `time_parts`); throughput
    counts tokens for a transformer and samples for an op-graph model. `script_notes`: what
    the training script must do (an op-graph model's plan)."""
    chosen = doc.chosen
    kind, time_parts, unit = doc.model.kind, doc.model.time_parts, doc.model.unit
    rows = _chart_estimates(doc, report.chart_rows)
    return {
        "kind": kind,
        "model_title": doc.model.title,
        "unit": unit,
        "headline": _headline(chosen),
        "layout": _layout_rows(chosen, unit),
        "proposals": [_proposal_row(p, applied_as) for p in doc.proposals],
        "why": why_context(doc),  # render/compare.py: the chosen plan against the runner-up
        "advice": [md(a) for a in doc.advice],
        "warnings": [md(w) for w in doc.warnings],
        "notes": [md(n) for n in notes],
        "script_notes": [md(n) for n in script_notes],
        "memory": _part_rows(chosen.memory.model_dump(), MEMORY_PARTS, gib),
        "memory_total": gib(chosen.memory.total),
        "memory_capacity": gib(chosen.memory.capacity),
        "time": _part_rows(chosen.time.model_dump(), time_parts, seconds),
        "step": seconds(chosen.time.step_s),
        "candidates": [_candidate_row(i, e, e == chosen) for i, e in enumerate(doc.candidates)],
        "rejected": [
            {"reason": md(reason), "count": str(count)}
            for reason, count in sorted(doc.rejected.items(), key=lambda kv: (-kv[1], kv[0]))
        ],
        "search": search_rows(doc),
        "budget": budget_rows(doc),
        "memory_chart": memory_chart(rows, report),
        "time_chart": time_chart(rows, report, time_parts),
    }


def search_rows(doc: PlanDocument) -> list[tuple[str, str]]:
    """What the search was limited by: pins, bounds, headroom (empty for an older plan.json)."""
    found = doc.search
    if found is None:
        return []
    shown = {True: "true", False: "false"}
    pins = " ".join(f"{k}={shown.get(v, v)}" for k, v in found.pins.items())  # type: ignore[call-overload]
    bounds = " ".join(f"{k}={v}" for k, v in found.bounds.items())
    headroom = f"{gib(found.headroom_bytes)} per GPU ({md(found.headroom_source)})"
    return [("pinned", pins or "none"), ("bounds", bounds or "none"), ("headroom", headroom)]


def budget_rows(doc: PlanDocument) -> list[tuple[str, str]]:
    """The training budget's figures, formatted (empty without `--tokens`)."""
    b = doc.budget
    if b is None:
        return []
    rows = [("tokens", f"{b.tokens:,.0f}")]
    if b.deadline is not None:
        tried = ", ".join(
            f"{g}: {'-' if d is None else f'{d:.1f} d'}" for g, d in b.deadline.tried.items()
        )
        rows.append((f"GPUs for {b.deadline.days:g} days", f"{b.deadline.gpus} (tried {tried})"))
    rows += [
        ("steps", f"{b.steps:,} of {b.tokens_per_step:,.0f} tokens, {b.step_s:.3f} s each"),
        ("compute", f"{b.compute_days:,.2f} days, {b.compute_gpu_hours:,.0f} GPU-hours"),
        (
            "interruptions",
            f"{b.interruptions:,.1f} expected; job MTBF {b.job_mtbf_hours:,.1f} h "
            f"({b.mtbf_gpu_hours:,.0f} GPU-hours per GPU, {md(b.mtbf_source)})",
        ),
        (
            "checkpoints",
            f"every {b.checkpoint_interval_s / 3600:,.2f} h (Young 1974), "
            f"{gib(b.checkpoint_bytes)} in {b.checkpoint_write_s:,.0f} s ({md(b.storage_source)})",
        ),
        ("checkpoint writing", f"{b.checkpoint_days:,.2f} days"),
        ("work lost to interruptions", f"{b.lost_days:,.2f} days"),
        ("wall clock", f"{b.wall_days:,.2f} days, {b.gpu_hours:,.0f} GPU-hours"),
    ]
    if b.cost is not None:
        rows.append(
            (
                "cost",
                f"{b.cost:,.0f} at {b.gpu_hour_price:g} per GPU-hour ({md(b.price_source or '')})",
            )
        )
    return rows


def md(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def gib(n_bytes: float) -> str:
    return f"{n_bytes / GIB:,.1f} GiB"


def seconds(value: float) -> str:
    return f"{value:,.2f} s" if value >= 1 else f"{value * MS_PER_S:,.1f} ms"


def _headline(e: Estimate) -> dict[str, str]:
    return {
        "step": seconds(e.time.step_s),
        "per_s": f"{e.throughput.tokens_per_s:,.0f}",  # tokens or samples (report `unit`)
        "mfu": f"{e.throughput.mfu:.1%}",
        "model_tflops": f"{e.throughput.model_tflops_per_gpu:,.1f}",
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


def _proposal_row(p: Any, applied_as: Mapping[str, str]) -> dict[str, str]:
    settings = ", ".join(f"{k}={v}" for k, v in p.settings.items())
    where = "; ".join(applied_as.get(k, NOT_RENDERED) for k in p.settings)
    return {
        "rule": md(p.rule_id),
        "description": md(p.description),
        "speedup": f"{p.estimated_speedup:.1f}x",
        "settings": md(settings),
        "applied": md(where),
    }


def _part_rows(values: Mapping[str, float], parts: Iterable[str], fmt: Any) -> list[list[str]]:
    parts = list(parts)
    total = sum(values[p] for p in parts) or 1
    return [[PART_LABELS[p], fmt(values[p]), f"{values[p] / total:.0%}"] for p in parts]


def _candidate_row(index: int, e: Estimate, chosen: bool) -> list[str]:
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
        f"{e.throughput.mfu:.1%}",
    ]


def _chart_estimates(doc: PlanDocument, limit: int) -> list[tuple[str, Estimate]]:
    """The chosen plan, then runners-up from the candidates, at most `limit` rows."""
    rows = [("chosen", doc.chosen)]
    for index, e in enumerate(doc.candidates):
        if len(rows) >= limit:
            break
        if e != doc.chosen:
            rows.append((f"#{index + 1}", e))
    return rows


# ---- charts --------------------------------------------------------------------------------


def _num(value: float) -> str:
    return f"{value:.1f}"


def _frame(style: ChartStyle, legend_items: int, rows: int) -> dict[str, float]:
    plot_x = style.margin + style.label_width
    per_row = max(1, (style.width - 2 * style.margin) // style.legend_item_width)
    legend_rows = -(-legend_items // per_row)
    top = style.margin + legend_rows * style.legend_height
    height = top + rows * (style.bar_height + style.bar_gap) + style.margin
    return {
        "plot_x": plot_x,
        "plot_w": style.width - plot_x - style.margin,
        "top": top,
        "height": height,
        "per_row": per_row,
    }


def _legend(style: ChartStyle, items: list[tuple[str, str]], per_row: int) -> list[dict[str, str]]:
    box = style.font_size * LEGEND_BOX_EM
    out = []
    for i, (label, color) in enumerate(items):
        x = style.margin + (i % per_row) * style.legend_item_width
        y = style.margin + (i // per_row) * style.legend_height
        out.append(
            {
                "x": _num(x),
                "y": _num(y),
                "box": _num(box),
                "text_x": _num(x + box + style.font_size / 2),
                "text_y": _num(y + box),
                "color": color,
                "label": label,
            }
        )
    return out


def _chart(
    report: ReportMapping,
    title: str,
    rows: list[tuple[str, list[tuple[str, float, str]], float | None]],
    extra_legend: tuple[str, str],
    scale_max: float,
) -> dict[str, Any]:
    """rows: (label, [(part, value, shown value)], marker value); one scale for every row."""
    style, colors = report.chart, report.colors
    parts = list(dict.fromkeys(part for _, segments, _ in rows for part, _, _ in segments))
    legend = [(PART_LABELS[p], colors[p]) for p in parts] + [(extra_legend[0], colors["limit"])]
    frame = _frame(style, len(legend), len(rows))
    frame["scale"] = frame["plot_w"] / (scale_max or 1)
    return {
        "title": title,
        "width": str(style.width),
        "height": _num(frame["height"]),
        "font_size": str(style.font_size),
        "bar_height": str(style.bar_height),
        "label_x": _num(style.margin),
        "legend": _legend(style, legend, frame["per_row"]),
        "limit_color": colors["limit"],
        "marker_label": extra_legend[1],
        "rows": [_row(report, frame, index, row) for index, row in enumerate(rows)],
    }


def _row(
    report: ReportMapping,
    frame: dict[str, float],
    index: int,
    row: tuple[str, list[tuple[str, float, str]], float | None],
) -> dict[str, Any]:
    """One stacked bar: its segments left to right, and its marker."""
    style, colors = report.chart, report.colors
    label, segments, marker = row
    y = frame["top"] + index * (style.bar_height + style.bar_gap)
    x, bars = frame["plot_x"], []
    for part, value, shown in segments:
        width = value * frame["scale"]
        if width > 0:
            bars.append(
                {
                    "x": _num(x),
                    "width": _num(width),
                    "color": colors[part],
                    "title": f"{PART_LABELS[part]}: {shown}",
                }
            )
        x += width
    marker_x = None if marker is None else frame["plot_x"] + marker * frame["scale"]
    return {
        "label": label,
        "y": _num(y),
        "text_y": _num(y + style.bar_height / 2 + style.font_size * TEXT_BASELINE_EM),
        "bars": bars,
        "marker_x": None if marker_x is None else _num(marker_x),
        "marker_y2": _num(y + style.bar_height),
    }


def memory_chart(rows: list[tuple[str, Estimate]], report: ReportMapping) -> dict[str, Any]:
    """Memory per GPU stacked by part, each row's capacity marked."""
    data = []
    for label, e in rows:
        values = e.memory.model_dump()
        segments = [(p, float(values[p]), gib(values[p])) for p in MEMORY_PARTS]
        data.append((f"{label} {gib(e.memory.total)}", segments, float(e.memory.capacity)))
    top = max(max(e.memory.total, e.memory.capacity) for _, e in rows)
    title = "Memory per GPU by part, against the GPU's capacity"
    return _chart(report, title, data, ("capacity", "capacity"), float(top))


def time_chart(
    rows: list[tuple[str, Estimate]], report: ReportMapping, parts: Iterable[str]
) -> dict[str, Any]:
    """Step time by `parts` (before overlap), the overlapped step marked."""
    data = []
    top = 0.0
    for label, e in rows:
        values = e.time.model_dump()
        segments = [(p, values[p], seconds(values[p])) for p in parts]
        top = max(top, sum(v for _, v, _ in segments), e.time.step_s)
        data.append((f"{label} {seconds(e.time.step_s)}", segments, e.time.step_s))
    title = "Step time by part (bars: parts added up; mark: the step once overlap is applied)"
    return _chart(report, title, data, ("step", "step with overlap"), top)
