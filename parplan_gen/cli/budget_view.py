"""Readable view of what a plan was searched under (pins, bounds, headroom) and of its training
budget (`plan --tokens`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from parplan_gen.inputs.defaults import GIB

if TYPE_CHECKING:
    from parplan_gen.planning.budget import Budget
    from parplan_gen.planning.pins import SearchRecord


def search_line(record: SearchRecord | None) -> str | None:
    """`Search: pinned tp=8; bounds max_pp=4; headroom 9.2 GiB kept free (default: ...)`."""
    if record is None:
        return None
    parts = []
    if record.pins:
        parts.append("pinned " + " ".join(f"{k}={_shown(v)}" for k, v in record.pins.items()))
    if record.bounds:
        parts.append("bounds " + " ".join(f"{k}={v}" for k, v in record.bounds.items()))
    parts.append(
        f"headroom {record.headroom_bytes / GIB:.1f} GiB kept free per GPU ({record.headroom_source})"
    )
    return "Search: " + "; ".join(parts)


def _shown(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def budget_lines(budget: Budget | None) -> list[str]:
    """The budget section of the text view (empty without --tokens)."""
    if budget is None:
        return []
    lines = ["", f"Budget for {budget.tokens:,.0f} tokens"]
    if budget.deadline is not None:
        d = budget.deadline
        tried = ", ".join(f"{g}: {'-' if v is None else f'{v:.1f} d'}" for g, v in d.tried.items())
        lines.append(f"  GPUs for {d.days:g} days:  {d.gpus} (tried {tried})")
    lines += [
        f"  steps:             {budget.steps:,} of {budget.tokens_per_step:,.0f} tokens, "
        f"{budget.step_s:.3f} s each",
        f"  compute:           {budget.compute_days:,.2f} days, "
        f"{budget.compute_gpu_hours:,.0f} GPU-hours",
        f"  interruptions:     {budget.interruptions:,.1f} expected (job MTBF "
        f"{budget.job_mtbf_hours:,.1f} h = {budget.mtbf_gpu_hours:,.0f} GPU-hours per GPU / "
        f"GPUs; {budget.mtbf_source})",
        f"  checkpoints:       every {budget.checkpoint_interval_s / 3600:,.2f} h (Young 1974), "
        f"{budget.checkpoint_bytes / GIB:,.0f} GiB written in {budget.checkpoint_write_s:,.0f} s "
        f"({budget.storage_source})",
        f"  overhead:          {budget.checkpoint_days:,.2f} days writing checkpoints, "
        f"{budget.lost_days:,.2f} days lost to interruptions",
        f"  wall clock:        {budget.wall_days:,.2f} days, {budget.gpu_hours:,.0f} GPU-hours",
    ]
    if budget.cost is not None:
        lines.append(
            f"  cost:              {budget.cost:,.0f} at {budget.gpu_hour_price:g} per GPU-hour "
            f"({budget.price_source})"
        )
    return lines
