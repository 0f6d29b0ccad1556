"""The geometry of plan_memory.svg: one column per charted layout, its memory parts stacked and
the memory its plan keeps free above them (the headroom, MemoryBreakdown.kept_free), against
the GPU's capacity, in GiB."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from parplan_gen.cost.estimate import MEMORY_PARTS, Estimate
from parplan_gen.inputs.defaults import GIB
from parplan_gen.planning.document import PlanDocument
from parplan_gen.render.charts import (
    CHAR_EM,
    PART_LABELS,
    TEXT_BASELINE_EM,
    chart_header,
    chart_title,
    layout_labels,
    nice_ticks,
    num,
    tick_text,
)
from parplan_gen.render.labels import gib
from parplan_gen.render.mapping_schema import ReportMapping

COLUMN_SHARE = 0.6  # a column's width in its slot
LINE_EM = 1.25  # label line spacing, in font sizes
HEADROOM_DASH = "6 4"  # the outline of the memory kept free, and its legend swatch (SVG dash)


def _wrap(words: list[str], chars: int) -> list[str]:
    lines: list[str] = []
    for word in words:
        if lines and len(lines[-1]) + 1 + len(word) <= chars:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return lines


def memory_chart(
    doc: PlanDocument, report: ReportMapping, rows: Sequence[tuple[bool, Estimate]]
) -> dict[str, Any]:
    """Columns of memory per GPU (bytes as the estimate gives them, drawn in GiB), each with
    the memory its plan keeps free outlined above it (the headroom the search kept, per
    layout), and the GPU's capacity line."""
    style, colors = report.chart, report.colors
    capacity = max(e.memory.capacity for _, e in rows)
    legend = [{"label": PART_LABELS[p], "color": colors[p], "kind": "box"} for p in MEMORY_PARTS]
    legend.append({"label": "GPU capacity", "color": colors["limit"], "kind": "line"})
    kept = [doc.kept_free(e) for _, e in rows]
    if any(kept):
        legend.append(
            {
                "label": "kept free",
                "color": colors["limit"],
                "kind": "outline",
                "dash": HEADROOM_DASH,
            }
        )
    header = chart_header(style, chart_title(doc, "Memory per GPU"), legend)
    tops = [e.memory.total + k for (_, e), k in zip(rows, kept, strict=True)]
    ticks = nice_ticks(max(capacity, *tops) / GIB)
    step = ticks[1] - ticks[0]
    tick_w = CHAR_EM * style.font_size * max(len(tick_text(t, step, "GiB")) for t in ticks)
    plot_x = style.margin + tick_w + 8
    line_label_w = CHAR_EM * style.font_size * 14
    plot_w = style.width - plot_x - style.margin - line_label_w
    plot_top = header["plot_top"] + 2 * style.font_size
    plot_bottom = plot_top + style.plot_height
    scale = style.plot_height / (ticks[-1] * GIB)  # pixels per byte

    def y_of(n_bytes: float) -> float:
        return plot_bottom - n_bytes * scale

    slot = plot_w / len(rows)
    chars = max(6, int(slot / (CHAR_EM * style.font_size)))
    columns, label_lines = [], 1
    labels = layout_labels(doc, rows)
    for index, ((_, e), words, free) in enumerate(zip(rows, labels, kept, strict=True)):
        x = plot_x + index * slot + slot * (1 - COLUMN_SHARE) / 2
        values, y, parts = e.memory.model_dump(), plot_bottom, []
        for part in MEMORY_PARTS:
            height = values[part] * scale
            if height > 0:
                y -= height
                parts.append(
                    {
                        "y": num(y),
                        "height": num(height),
                        "color": colors[part],
                        "title": f"{PART_LABELS[part]}: {gib(values[part])}",
                    }
                )
        lines = [*_wrap(words, chars), gib(e.memory.total)]
        label_lines = max(label_lines, len(lines))
        columns.append(
            {
                "x": num(x),
                "width": num(slot * COLUMN_SHARE),
                "centre": num(x + slot * COLUMN_SHARE / 2),
                "parts": parts,
                "kept_free": {
                    "y": num(y - free * scale),
                    "height": num(free * scale),
                    "title": f"kept free: {gib(free)}",
                }
                if free
                else None,
                "lines": [
                    {"text": text, "y": num(plot_bottom + style.font_size * LINE_EM * (i + 1))}
                    for i, text in enumerate(lines)
                ],
            }
        )
    right, capacity_y = plot_x + plot_w, y_of(capacity)
    shift = -4  # the capacity's name and value just above its line
    return {
        **header,
        "height": num(plot_bottom + style.font_size * LINE_EM * (label_lines + 1) + style.margin),
        "plot_x": num(plot_x),
        "plot_right": num(right),
        "plot_top": num(plot_top),
        "plot_bottom": num(plot_bottom),
        "limit_color": colors["limit"],
        "kept_free_dash": HEADROOM_DASH,
        "ticks": [
            {
                "y": num(y_of(t * GIB)),
                "text_y": num(y_of(t * GIB) + style.font_size * TEXT_BASELINE_EM),
                "text": tick_text(t, step, "GiB"),
            }
            for t in ticks
        ],
        "tick_text_x": num(plot_x - 6),
        "columns": columns,
        "capacity": {
            "y": num(capacity_y),
            "text": f"GPU capacity {gib(capacity)}",
            "name": "GPU capacity",
            "value": gib(capacity),
            "text_x": num(right + 4),
            "text_y": num(capacity_y + shift - style.font_size),
            "value_y": num(capacity_y + shift),
        },
    }
