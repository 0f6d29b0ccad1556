"""The geometry of plan_time.svg and plan_memory.svg, from the plan document's own figures.

The time chart draws each charted layout's step as the cost model composes it: the parts the
step waits for one after another (compute, the exposed part of each communication, the
bubble, the optimizer), and the communication that overlaps compute as a band under the
compute bar, so nothing hidden is added twice. The memory chart stacks each layout's memory
parts in a column, the memory its plan keeps free (the headroom, the estimate's
`memory.kept_free`) outlined above, against the GPU's capacity. Every figure is the
estimate's; this module only scales them. Sizes and colours come from templates/mapping.yaml `report:`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from parplan_gen.cost.estimate import EXPOSED_PARTS, MEMORY_PARTS, TIME_PARTS, Estimate
from parplan_gen.planning.document import PlanDocument
from parplan_gen.render import labels
from parplan_gen.render.labels import MS_PER_S, seconds
from parplan_gen.render.mapping_schema import ChartStyle, ReportMapping

PART_LABELS = {p: p.removesuffix("_s").replace("_", " ") for p in (*MEMORY_PARTS, *TIME_PARTS)}
LEGEND_BOX_EM = 0.9  # legend swatch side, in font sizes
TEXT_BASELINE_EM = 0.35  # shifts text down so it centres on a line
CHAR_EM = 0.65  # a sans-serif character's advance, in font sizes (label widths)
TICK_TARGET = 5  # about this many axis intervals
NICE_STEPS = (1, 2, 5, 10)
# The order of a step (rules/cost/time.yaml step_time): the stage's work, its bubble, then
# what follows it; a kind's parts keep this order.
STEP_ORDER = (
    "compute_s", "overlap_cost_s", "tp_comm_s", "cp_comm_s", "ep_comm_s", "bn_comm_s",
    "offload_s", "bubble_s", "pp_comm_s", "dp_comm_s", "optimizer_s",
)  # fmt: skip
# Where hidden communication sits under compute: TP's in the GEMMs from the first layer on,
# DP's gradient reduction in the backward, which ends the compute.
HIDDEN_FROM_START = {"tp_comm_s": True, "dp_comm_s": False}


def num(value: float) -> str:
    return f"{value:.1f}"


# ---- labels --------------------------------------------------------------------------------


def layout_labels(doc: PlanDocument, rows: Sequence[tuple[bool, Estimate]]) -> list[list[str]]:
    """Each row's label as words: the layout's label (render/labels.py, the sizes of the
    model's kind), "(does not fit)" where the memory rules fail (the closest candidate of a
    search where nothing fits), and "(chosen)" on the chosen plan, "(closest)" when it does not
    fit either (nothing fits: the text view's "Closest candidate")."""
    names = labels.layout_labels([e for _, e in rows], doc.model.layout_dims)
    return [
        name.split()
        + ([] if e.memory.fits else ["(does", "not", "fit)"])
        + ([("(chosen)" if e.memory.fits else "(closest)")] if chosen else [])
        for name, (chosen, e) in zip(names, rows, strict=True)
    ]


def chart_rows(doc: PlanDocument, limit: int) -> list[tuple[bool, Estimate]]:
    """The chosen plan, then runners-up from the candidates, at most `limit` rows."""
    rows = [(True, doc.chosen)]
    rows += [(False, e) for e in doc.runners_up]
    return rows[:limit]


def chart_title(doc: PlanDocument, what: str) -> str:
    cluster = doc.cluster
    return f"{what}: {doc.model.title} on {cluster.num_gpus} x {cluster.gpu.display_name}"


# ---- axis and legend -----------------------------------------------------------------------


def nice_ticks(top: float) -> list[float]:
    """0, step, 2 step ... up to the first tick at or above `top`; step 1, 2 or 5 x 10^k."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / TICK_TARGET
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in NICE_STEPS if m * magnitude >= raw)
    count = math.ceil(top / step - 1e-9)
    return [k * step for k in range(count + 1)]


def tick_text(value: float, step: float, unit: str) -> str:
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return f"{value:,.{decimals}f} {unit}"


def time_unit(top: float) -> tuple[str, float]:
    """Seconds, or milliseconds for a step under a second: the unit and its seconds."""
    return ("s", 1.0) if top >= 1 else ("ms", 1 / MS_PER_S)


def _legend(
    style: ChartStyle, top: float, items: list[dict[str, str]]
) -> tuple[list[dict[str, str]], float]:
    """Legend entries placed left to right, wrapping; and the y below them."""
    box = style.font_size * LEGEND_BOX_EM
    x, y, out = float(style.margin), top, []
    for item in items:
        width = box + style.font_size * (1.5 + CHAR_EM * len(item["label"]))
        width = max(width, style.legend_item_width or 0)
        if x + width > style.width - style.margin and x > style.margin:
            x, y = float(style.margin), y + style.legend_height
        out.append(
            {
                **item,
                "x": num(x),
                "y": num(y),
                "box": num(box),
                "text_x": num(x + box + style.font_size / 2),
                "text_y": num(y + box - 1),
                "line_y": num(y + box / 2),
                "line_x2": num(x + box),
            }
        )
        x += width
    return out, y + style.legend_height


def chart_header(style: ChartStyle, title: str, legend: list[dict[str, str]]) -> dict[str, Any]:
    title_y = style.margin + style.font_size * 1.2
    placed, below = _legend(style, title_y + style.font_size, legend)
    return {
        "title": title,
        "title_y": num(title_y),
        "width": str(style.width),
        "font_size": str(style.font_size),
        "title_size": num(style.font_size * 1.2),
        "margin": num(style.margin),
        "legend": placed,
        "plot_top": below,
    }


# ---- time ----------------------------------------------------------------------------------


def _step_parts(e: Estimate, parts: Iterable[str]) -> tuple[list, list]:
    """(part, value waited for, shown) in step order, and (part, hidden seconds, shown)."""
    values = e.time.model_dump()
    shown, hidden = [], []
    for part in (p for p in STEP_ORDER if p in set(parts)):
        exposed = values.get(EXPOSED_PARTS.get(part, ""))
        if exposed is None or exposed >= values[part]:
            shown.append((part, values[part], f"{PART_LABELS[part]}: {seconds(values[part])}"))
            continue
        text = f"{PART_LABELS[part]} exposed: {seconds(exposed)} of {seconds(values[part])}"
        shown.append((part, exposed, text))
        rest = values[part] - exposed
        hidden.append((part, rest, f"{PART_LABELS[part]} hidden under compute: {seconds(rest)}"))
    return shown, hidden


def time_chart(
    doc: PlanDocument, report: ReportMapping, rows: Sequence[tuple[bool, Estimate]]
) -> dict[str, Any]:
    """Each row's step on one time axis: what it waits for in sequence, hidden communication
    as bands under compute, the step (time.step_s) marked and written at the bar's end."""
    style, colors = report.chart, report.colors
    parts = doc.model.time_parts
    steps = [_step_parts(e, parts) for _, e in rows]
    lanes = [p for p in STEP_ORDER if any(q == p for _, hidden in steps for q, _, _ in hidden)]
    used = [
        p for p in STEP_ORDER if any(q == p and v > 0 for shown, _ in steps for q, v, _ in shown)
    ]
    legend = [{"label": PART_LABELS[p], "color": colors[p], "kind": "box"} for p in used]
    legend += [
        {"label": f"{PART_LABELS[p]} hidden", "color": colors[p], "kind": "band"} for p in lanes
    ]
    legend.append({"label": "step", "color": colors["limit"], "kind": "line"})
    header = chart_header(style, chart_title(doc, "Step time"), legend)
    labels = [" ".join(words) for words in layout_labels(doc, rows)]
    label_w = max(style.label_width, CHAR_EM * style.font_size * max(map(len, labels)) + 8)
    plot_x = style.margin + label_w
    value_w = style.font_size * CHAR_EM * 10  # room for the step written after the bar
    plot_w = style.width - plot_x - style.margin - value_w
    top = max(
        max(sum(v for _, v, _ in shown), e.time.step_s)
        for (_, e), (shown, _) in zip(rows, steps, strict=True)
    )
    unit, unit_s = time_unit(top)
    ticks = nice_ticks(top / unit_s)
    scale = plot_w / (ticks[-1] * unit_s)
    band = style.bar_height / 3
    row_h = style.bar_height + len(lanes) * (band + 1) + style.bar_gap
    y0 = header["plot_top"] + style.font_size / 2
    out_rows = []
    for index, ((_, e), (shown, hidden), label) in enumerate(zip(rows, steps, labels, strict=True)):
        y = y0 + index * row_h
        out_rows.append(_time_row(report, (plot_x, y, scale), (label, e, (shown, hidden)), lanes))
    axis_y = y0 + len(rows) * row_h
    step = ticks[1] - ticks[0]
    note = _unknown_overlap_note(rows)
    return {
        **header,
        "height": num(axis_y + style.font_size * (5 if note else 3.5) + style.margin),
        "bar_height": str(style.bar_height),
        "band_height": num(band),
        "label_x": num(plot_x - 6),
        "plot_x": num(plot_x),
        "plot_right": num(plot_x + plot_w),
        "plot_top": num(y0 - style.bar_gap / 2),
        "axis_y": num(axis_y),
        "limit_color": colors["limit"],
        "ticks": [
            {
                "x": num(plot_x + t * unit_s * scale),
                "text": tick_text(t, step, unit),
            }
            for t in ticks
        ],
        "tick_y2": num(axis_y + 4),
        "tick_text_y": num(axis_y + style.font_size * 1.5),
        "axis_label": f"time per optimizer step ({unit})",
        "note": note,
        "note_y": num(axis_y + style.font_size * 4.2),
        "axis_label_x": num(plot_x + plot_w / 2),
        "axis_label_y": num(axis_y + style.font_size * 2.8),
        "rows": out_rows,
    }


def _unknown_overlap_note(rows: Sequence[tuple[bool, Estimate]]) -> str:
    """A plan.json written before estimates carried the exposed parts: its communication is
    drawn in full, so the bar may pass the step mark."""
    for _, e in rows:
        values = e.time.model_dump()
        if any(values.get(x) is None and values[p] > 0 for p, x in EXPOSED_PARTS.items()):
            return (
                "This plan.json does not say how much communication overlaps compute: "
                "it is drawn in full; the mark is the step."
            )
    return ""


def _time_row(
    report: ReportMapping,
    frame: tuple[float, float, float],
    row: tuple[str, Estimate, tuple],
    lanes: list,
) -> dict[str, Any]:
    """One layout's bar (what the step waits for), its hidden-communication bands, its step."""
    style, colors = report.chart, report.colors
    plot_x, y, scale = frame
    label, e, (shown, hidden) = row
    x, bars, compute = plot_x, [], (plot_x, plot_x)
    for part, value, text in shown:
        width = value * scale
        if width > 0:
            bars.append({"x": num(x), "width": num(width), "color": colors[part], "title": text})
        if part == "compute_s":
            compute = (x, x + width)
        x += width
    band = style.bar_height / 3
    bands = []
    for part, value, text in hidden:
        width = value * scale
        start = compute[0] if HIDDEN_FROM_START.get(part, True) else max(plot_x, compute[1] - width)
        lane_y = y + style.bar_height + 1 + lanes.index(part) * (band + 1)
        bands.append(
            {
                "x": num(start),
                "y": num(lane_y),
                "width": num(width),
                "color": colors[part],
                "title": text,
            }
        )
    step_x = plot_x + e.time.step_s * scale
    return {
        "label": label,
        "y": num(y),
        "text_y": num(y + style.bar_height / 2 + style.font_size * TEXT_BASELINE_EM),
        "bars": bars,
        "bands": bands,
        "step_x": num(step_x),
        "step_y2": num(y + style.bar_height + len(lanes) * (band + 1)),
        "step_text_x": num(step_x + 4),
        "step_text": seconds(e.time.step_s),
    }
