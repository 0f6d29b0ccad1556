"""The geometry of frontier.svg: days to train (y) against cost, or GPU-hours where some GPU type
has no price (x), both on log scales; one series of points per GPU type, the Pareto front drawn
through its points, the `--days` deadline and the `--budget` as dashed lines, their picks
ringed. Every figure is the frontier's (planning/frontier.py); this module only scales them.
Sizes come from templates/mapping.yaml `report: chart`, the series' colours from its
`report: colors` (SERIES_COLORS names which)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from parplan_gen.planning.frontier import Frontier, FrontierPoint, Pick
from parplan_gen.render.charts import CHAR_EM, TEXT_BASELINE_EM, chart_header, num
from parplan_gen.render.mapping_schema import ReportMapping

# The report's colours a GPU type's series takes, in order (Okabe-Ito, far apart), then again.
SERIES_COLORS = (
    "compute_s", "dp_comm_s", "pp_comm_s", "ep_comm_s", "cp_comm_s", "tp_comm_s", "bn_comm_s",
    "overlap_cost_s",
)  # fmt: skip
PLOT_ASPECT = 0.6  # the plot's height, as a share of its width
POINT_EM = 0.4  # a point's radius, in font sizes
PICK_RING = 2.2  # a picked point's ring, in point radii
LIMIT_DASH = "6 4"  # the deadline and budget lines (SVG dash pattern)
MANTISSAS = (1, 2, 5)  # log-axis ticks at 1, 2 and 5 x 10^k ...
MAX_TICKS = 7  # ... or at 10^k alone when that would be more ticks than this
SPAN_PAD = 2.0  # a figure without spread gets an axis from half of it to twice it
LABEL_GAP = 3  # pixels between a point and its count
AXIS_LABEL_EM = 2.6  # the axis titles' distance from the axes, in font sizes
COMPACT = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))  # tick text: 2.5M


def compact(value: float) -> str:
    """`2.5M`, `100k`, `50`, `0.5`: a tick's value, short."""
    for scale, suffix in COMPACT:
        if value >= scale:
            return f"{value / scale:g}{suffix}"
    return f"{value:g}"


def log_ticks(low: float, high: float) -> list[float]:
    """Ticks at 1, 2, 5 x 10^k from the last at or below `low` to the first at or above `high`
    (10^k alone when those are more than MAX_TICKS)."""
    if low == high:
        low, high = low / SPAN_PAD, high * SPAN_PAD
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    for mantissas in (MANTISSAS, (1,)):
        steps = [m * 10.0**k for k in range(first, last + 1) for m in mantissas]
        start = max(t for t in steps if t <= low * (1 + 1e-9))
        end = min(t for t in steps if t >= high * (1 - 1e-9))
        ticks = [t for t in steps if start <= t <= end]
        if len(ticks) <= MAX_TICKS:
            break
    return ticks


class _Axis:
    """A log axis from its first tick to its last, over `length` pixels from `origin`; `sign`
    -1 draws upwards (y)."""

    def __init__(self, ticks: list[float], origin: float, length: float, sign: int) -> None:
        self.ticks, self.origin, self.length, self.sign = ticks, origin, length, sign
        self.low, self.span = math.log10(ticks[0]), math.log10(ticks[-1] / ticks[0])

    def at(self, value: float) -> float:
        return self.origin + self.sign * self.length * (math.log10(value) - self.low) / self.span


def _placed(
    points: Sequence[FrontierPoint], frontier: Frontier
) -> list[tuple[FrontierPoint, float]]:
    """The points that have a plan and a figure on the frontier's basis, with that figure."""
    out = []
    for p in points:
        value = p.value(frontier.basis)
        if p.wall_days is not None and value is not None:
            out.append((p, value))
    return out


def frontier_chart(frontier: Frontier, report: ReportMapping) -> dict[str, Any]:
    """Everything frontier.svg places: header and legend, axes and ticks, the series' points,
    the front's line, the deadline and budget lines and their picks."""
    style, colors = report.chart, report.colors
    color_of = {
        gpu: colors[SERIES_COLORS[i % len(SERIES_COLORS)]]
        for i, gpu in enumerate(frontier.gpu_types)
    }
    what = "cost" if frontier.basis == "cost" else "GPU-hours"
    legend = [{"label": gpu, "color": color_of[gpu], "kind": "box"} for gpu in frontier.gpu_types]
    legend.append({"label": "Pareto front", "color": colors["limit"], "kind": "line"})
    limits = [
        (n, p) for n, p in (("deadline", frontier.deadline), ("budget", frontier.budget)) if p
    ]
    legend += [
        {
            "label": _limit_text(name, pick),
            "color": colors["limit"],
            "kind": "dash",
            "dash": LIMIT_DASH,
        }
        for name, pick in limits
    ]
    title = f"Days to train against {what}: {frontier.title}, {compact(frontier.tokens)} tokens"
    header = chart_header(style, title, legend)
    placed = _placed(frontier.points, frontier)
    days = [p.wall_days for p, _ in placed if p.wall_days is not None] or [1.0]
    values = [v for _, v in placed] or [1.0]
    if frontier.deadline is not None:
        days.append(frontier.deadline.limit)
    if frontier.budget is not None and frontier.basis == "cost":
        values.append(frontier.budget.limit)
    y_ticks, x_ticks = log_ticks(min(days), max(days)), log_ticks(min(values), max(values))
    tick_w = CHAR_EM * style.font_size * max(len(compact(t)) for t in y_ticks)
    plot_x = style.margin + style.font_size * AXIS_LABEL_EM + tick_w
    plot_w = style.width - plot_x - style.margin - style.font_size * CHAR_EM * 6
    plot_top = header["plot_top"] + style.font_size
    plot_h = plot_w * PLOT_ASPECT
    plot_bottom = plot_top + plot_h
    x_axis = _Axis(x_ticks, plot_x, plot_w, 1)
    y_axis = _Axis(y_ticks, plot_bottom, plot_h, -1)
    radius = style.font_size * POINT_EM
    return {
        **header,
        "height": num(plot_bottom + style.font_size * (AXIS_LABEL_EM + 1) + style.margin),
        "plot_x": num(plot_x),
        "plot_right": num(plot_x + plot_w),
        "plot_top": num(plot_top),
        "plot_bottom": num(plot_bottom),
        "radius": num(radius),
        "limit_color": colors["limit"],
        "dash": LIMIT_DASH,
        "x_ticks": [{"x": num(x_axis.at(t)), "text": compact(t)} for t in x_ticks],
        "y_ticks": [
            {
                "y": num(y_axis.at(t)),
                "text_y": num(y_axis.at(t) + style.font_size * TEXT_BASELINE_EM),
                "text": compact(t),
            }
            for t in y_ticks
        ],
        "tick_text_x": num(plot_x - 6),
        "tick_text_y": num(plot_bottom + style.font_size * 1.4),
        "x_label": (
            "cost, in the units of --gpu-hour-price (log scale)"
            if frontier.basis == "cost"
            else "GPU-hours (log scale)"
        ),
        "x_label_x": num(plot_x + plot_w / 2),
        "x_label_y": num(plot_bottom + style.font_size * AXIS_LABEL_EM),
        "y_label": "days to train (log scale)",
        "y_label_x": num(style.margin + style.font_size),
        "y_label_y": num(plot_top + plot_h / 2),
        "points": [
            _point(p, (x_axis.at(v), y_axis.at(p.wall_days or v)), radius, color_of[p.gpu], what, v)
            for p, v in placed
        ],
        "front": " ".join(
            f"{num(x_axis.at(v))},{num(y_axis.at(p.wall_days))}"
            for p, v in sorted(placed, key=lambda pv: (pv[1], pv[0].wall_days))
            if p.on_front and p.wall_days is not None
        ),
        "limits": [_limit(name, pick, frontier, x_axis, y_axis) for name, pick in limits],
        "rings": [
            {"x": num(x_axis.at(v)), "y": num(y_axis.at(p.wall_days)), "r": num(radius * PICK_RING)}
            for name, pick in limits
            for p, v in placed
            if p.wall_days is not None and (pick.gpu, pick.gpus) == (p.gpu, p.gpus)
        ],
    }


def _point(
    p: FrontierPoint, at: tuple[float, float], radius: float, color: str, what: str, value: float
) -> dict[str, Any]:
    """One point: filled on the front, hollow off it; a front point shows its GPU count."""
    x, y = at
    days = p.wall_days or 0.0
    return {
        "x": num(x),
        "y": num(y),
        "color": color,
        "filled": p.on_front,
        "label": str(p.gpus) if p.on_front else "",
        "label_x": num(x + radius + LABEL_GAP),
        "label_y": num(y - radius - LABEL_GAP),
        "title": f"{p.gpu} x {p.gpus}: {days:,.1f} days, {what} {value:,.0f}",
    }


def _limit(
    name: str, pick: Pick, frontier: Frontier, x_axis: _Axis, y_axis: _Axis
) -> dict[str, Any]:
    """The deadline as a horizontal line; the budget as a vertical one (on a cost axis only)."""
    if name == "deadline":
        y = num(y_axis.at(pick.limit))
        x1, x2 = num(x_axis.origin), num(x_axis.origin + x_axis.length)
        return {"x1": x1, "y1": y, "x2": x2, "y2": y, "title": _limit_text(name, pick)}
    if frontier.basis != "cost":
        return {}
    x = num(x_axis.at(pick.limit))
    y1, y2 = num(y_axis.origin), num(y_axis.origin - y_axis.length)
    return {"x1": x, "y1": y1, "x2": x, "y2": y2, "title": _limit_text(name, pick)}


def _limit_text(name: str, pick: Pick) -> str:
    return f"deadline {pick.limit:g} days" if name == "deadline" else f"budget {pick.limit:,.0f}"
