"""The rows of plan.md's "Search" and "Training budget" tables, which the text view prints too:
formatted figures only, so a command that prints a plan without writing one loads no template
or chart."""

from __future__ import annotations

from parplan_gen.inputs.safe_text import markdown
from parplan_gen.planning.budget import COUNT_CHOICE, GIGA, HOUR_S, Budget, Deadline
from parplan_gen.planning.document import PlanDocument
from parplan_gen.planning.pins import HeadroomRecord
from parplan_gen.render.labels import gib, seconds


def search_rows(doc: PlanDocument) -> list[tuple[str, str]]:
    """What the search was limited by: pins, bounds, headroom."""
    found = doc.search
    pins = " ".join(f"{k}={pin_text(v)}" for k, v in found.pins.items())
    bounds = " ".join(f"{k}={pin_text(v)}" for k, v in found.bounds.items())
    headroom = f"{headroom_text(found)} ({markdown(found.headroom_source)})"
    return [("pinned", pins or "none"), ("bounds", bounds or "none"), ("headroom", headroom)]


def headroom_text(found: HeadroomRecord) -> str:
    """`9.2 GiB per GPU`, `11.5 % of each layout's tensors` or both."""
    share = f"{found.headroom_share * 100:.1f} % of each layout's tensors"
    if not found.headroom_share:
        return f"{gib(found.headroom_bytes)} per GPU"
    return f"{gib(found.headroom_bytes)} per GPU + {share}" if found.headroom_bytes else share


def pin_text(value: object) -> str:
    """A pinned or bounded value as plan.md shows it: a switch as `true`/`false`, a size as its
    number (`tp=1`, never `tp=true`: 1 == True, so a look-up keyed by True catches it), any text
    escaped."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return markdown(str(value))


def budget_rows(doc: PlanDocument) -> list[tuple[str, str]]:
    """The training budget's figures, formatted (empty without `--tokens`)."""
    b = doc.budget
    if b is None:
        return []
    rows = [("tokens", f"{b.tokens:,.0f}")]
    if b.deadline is not None:
        rows += deadline_rows(b.deadline)
    rows += [
        ("steps", f"{b.steps:,} of {b.tokens_per_step:,.0f} tokens, {b.step_s:.3f} s each"),
        ("compute", f"{b.compute_days:,.2f} days, {b.compute_gpu_hours:,.0f} GPU-hours"),
        (
            "interruptions",
            f"{b.interruptions:,.1f} expected; job MTBF {b.job_mtbf_hours:,.1f} h "
            f"({b.mtbf_gpu_hours:,.0f} GPU-hours per GPU, {markdown(b.mtbf_source)})",
        ),
        ("checkpoints", _checkpoint_text(b)),
        *([("checkpointing", markdown(b.checkpoint_mode))] if b.checkpoint_mode else []),
        ("training stopped for checkpoints", f"{b.checkpoint_days:,.2f} days"),
        *([("restart", _restart_text(b))] if b.restart_s is not None else []),
        ("work lost to interruptions", f"{b.lost_days:,.2f} days"),
        ("wall clock", f"{b.wall_days:,.2f} days, {b.gpu_hours:,.0f} GPU-hours"),
    ]
    if b.cost is not None:
        rows.append(
            (
                "cost",
                f"{b.cost:,.0f} at {b.gpu_hour_price:g} per GPU-hour ({markdown(b.price_source or '')})",
            )
        )
    return rows


def deadline_rows(deadline: Deadline) -> list[tuple[str, str]]:
    """`--days`: the count chosen and how, the fastest, and every count tried with why it won
    or lost (a reason from a rule passes `markdown`)."""
    fastest = deadline.fastest
    chosen = f"{deadline.gpus}, {COUNT_CHOICE[deadline.choice]}"
    if fastest is not None and fastest != deadline.gpus:
        chosen += f"; the fastest: {fastest} ({deadline.tried[str(fastest)]:,.1f} d)"
    rows = [(f"GPUs for {deadline.days:g} days", chosen)]
    return rows + [(f"tried {g} GPUs", markdown(deadline.verdict(g))) for g in deadline.tried]


def _checkpoint_text(b: Budget) -> str:
    """`every 2.50 h (Young 1974), 105 GiB in 14 s (storage)`; an asynchronous checkpoint says
    what training waits for (the copy to host) and what runs in the background; an interval
    held at the storage's floor (budget_checkpoint_min_interval_s) says so."""
    interval = b.checkpoint_interval_s
    every = (
        f"every {interval / HOUR_S:,.2f} h" if interval >= HOUR_S else f"every {seconds(interval)}"
    )
    # max() in budget_checkpoint_interval_s returns the floor itself when it binds
    if b.checkpoint_floor_s is not None and interval == b.checkpoint_floor_s:
        every += (
            " (the storage's floor, above Young 1974's interval: a save must be on storage "
            "before the next starts"
        )
    else:
        every += " (Young 1974"
    written = f"{gib(b.checkpoint_bytes)} written in {b.checkpoint_write_s:,.0f} s"
    storage = markdown(b.storage_source)
    if not b.checkpoint_async or b.checkpoint_blocking_s is None or not b.host_bytes_per_s:
        return f"{every}), {written} ({storage})"
    host = f"{b.host_bytes_per_s / GIGA:,.0f} GB/s per GPU, {markdown(b.host_source or '')}"
    return (
        f"{every}; training waits {seconds(b.checkpoint_blocking_s)} per save: the copy to "
        f"host at {host}), {written} in the background ({storage})"
    )


def _restart_text(b: Budget) -> str:
    return (
        f"{seconds(b.restart_s or 0.0)} per interruption: the checkpoint read back (the job's "
        "relaunch is not counted: no published figure sourced)"
    )
