"""Readable view of what a plan was searched under (pins, bounds, headroom) and of its training
budget (`plan --tokens`): the rows plan.md shows (render/report.py), as text lines."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from parplan_gen.planning.document import PlanDocument


def search_line(doc: PlanDocument) -> str | None:
    """`Search: pinned tp=2; bounds none; headroom 11.5 % of each layout's tensors (default:
    ...)`."""
    from parplan_gen.render.report_rows import search_rows

    rows = search_rows(doc)
    return "Search: " + "; ".join(f"{k} {v}" for k, v in rows) if rows else None


def budget_lines(doc: PlanDocument) -> list[str]:
    """The budget section of the text view (empty without --tokens)."""
    from parplan_gen.render.report_rows import budget_rows

    rows = budget_rows(doc)
    if not rows:
        return []
    width = max(len(label) for label, _ in rows) + 1
    return ["", "Training budget", *(f"  {label + ':':<{width}} {value}" for label, value in rows)]
