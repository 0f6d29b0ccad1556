"""The cost/time frontier of a model over GPU types and counts (`parplan frontier`): the
contract (frontier.json: `Frontier`, one `FrontierPoint` per GPU type and count) and the pure
logic that marks it: the Pareto front (no other point at least as soon and as cheap, and better
in one), the cheapest point that meets a deadline (`--days`) and the soonest within a budget
(`--budget`).

Points are compared on cost where every GPU type asked for has a price, else on GPU-hours (the
frontier says so, `basis_note`). Nothing here plans: `api.frontier` makes the points with
`api.plan`, so each point's days and cost are the ones `plan --tokens` gives for it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from parplan_gen.cost.estimate import BackendRef
from parplan_gen.cost.layout import Layout
from parplan_gen.cost.mfu_convention import Attention, backend_convention

FORMAT_VERSION: Literal[1] = 1
JSON_INDENT = 2
Basis = Literal["cost", "gpu_hours"]
_STRICT = ConfigDict(extra="forbid", frozen=True)


class FrontierPoint(BaseModel):
    """One GPU type and count: the plan `plan --tokens` makes there, or why there is none."""

    model_config = _STRICT

    gpu: str = Field(description="The GPU, by its catalog name.")
    gpus: int = Field(description="GPUs of that type.")
    feasible: bool = Field(description="A layout runs and fits (else `reason` says why not).")
    reason: str | None = Field(description="Why no plan, one line (None: one fits).")
    backend: BackendRef | None = Field(description="The chosen plan's backend and release.")
    layout: Layout | None = Field(description="The chosen layout (plan.json `chosen.plan`).")
    layout_label: str | None = Field(description="The layout in words, as plan.md names it.")
    step_s: float | None = Field(description="Predicted step time, s.")
    mfu: float | None = Field(
        description="Model FLOPs utilisation, 0..1, the whole s x s attention scores counted."
    )
    mfu_causal: float | None = Field(
        None, description="The same with the causal half of the scores counted, 0..1."
    )
    mfu_convention: Attention | None = Field(
        None,
        description="The count the point's backend logs, which the views show: `causal` "
        "(`mfu_causal`) or `full` (`mfu`).",
    )
    wall_days: float | None = Field(description="Days to train (plan.json `budget.wall_days`).")
    gpu_hours: float | None = Field(description="GPU-hours (plan.json `budget.gpu_hours`).")
    gpu_hour_price: float | None = Field(description="Price of one GPU-hour (None: not given).")
    cost: float | None = Field(description="gpu_hours x price (plan.json `budget.cost`).")
    on_front: bool = Field(False, description="On the Pareto front of days against `basis`.")

    def value(self, basis: Basis) -> float | None:
        """What the point costs on `basis` (None: no plan, or no price)."""
        return self.cost if basis == "cost" else self.gpu_hours

    @property
    def shown_mfu(self) -> float | None:
        """The MFU in the count of `mfu_convention` (the whole-matrix one when it is not
        known)."""
        if self.mfu_convention == "causal" and self.mfu_causal is not None:
            return self.mfu_causal
        return self.mfu


class Pick(BaseModel):
    """The point `--days` or `--budget` marks, or why none is marked."""

    model_config = _STRICT

    limit: float = Field(description="The deadline (days) or the budget (cost).")
    gpu: str | None = Field(description="The point's GPU (None: no point meets the limit).")
    gpus: int | None = Field(description="The point's GPU count (None: none).")
    why: str = Field(description="How it was chosen, or why none was, one line.")


class Frontier(BaseModel):
    """frontier.json, which `parplan frontier --json` prints."""

    model_config = _STRICT

    format_version: Literal[1] = Field(FORMAT_VERSION, description="This contract's version.")
    model: str = Field(description="The model's name.")
    title: str = Field(description="The model as the views name it.")
    global_batch: int = Field(description="Sequences per optimizer step.")
    seq_len: int = Field(description="Tokens per sequence.")
    tokens: float = Field(description="Tokens to train.")
    gpu_types: list[str] = Field(description="The GPU types asked for, catalog names, in order.")
    counts: list[int] = Field(description="The GPU counts asked for, in order.")
    basis: Basis = Field(description="What the front compares with days: `cost` or `gpu_hours`.")
    basis_note: str | None = Field(description="Why GPU-hours, when not cost (None: cost).")
    deadline: Pick | None = Field(description="With `--days`: the cheapest point within it.")
    budget: Pick | None = Field(description="With `--budget`: the soonest point within it.")
    points: list[FrontierPoint] = Field(description="Each GPU type and count, as asked.")


def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """`a` is at least as good as `b` in both figures (lower is better) and better in one."""
    return a[0] <= b[0] and a[1] <= b[1] and a != b


def pareto_front(pairs: Sequence[tuple[float, float] | None]) -> list[bool]:
    """For each pair (days, cost) whether no other pair dominates it; None (no plan, or no
    figure to compare) is never on the front."""
    known = [p for p in pairs if p is not None]
    return [p is not None and not any(dominates(q, p) for q in known) for p in pairs]


def basis_of(points: Sequence[FrontierPoint], unpriced: Sequence[str]) -> tuple[Basis, str | None]:
    """Cost when every GPU type has a price, else GPU-hours and the note that says why."""
    if not unpriced:
        return "cost", None
    names = ", ".join(unpriced)
    return "gpu_hours", f"compared on GPU-hours: no price given for {names}"


def cheapest_within(points: Sequence[FrontierPoint], days: float, basis: Basis) -> Pick:
    """The point of least `basis` (then soonest, then first asked) that trains within `days`."""
    meets = [
        (value, p.wall_days, i)
        for i, p in enumerate(points)
        if p.wall_days is not None and p.wall_days <= days and (value := p.value(basis)) is not None
    ]
    what = "cost" if basis == "cost" else "GPU-hours"
    if not meets:
        return Pick(limit=days, gpu=None, gpus=None, why=f"no point trains within {days:g} days")
    best = points[min(meets)[2]]
    why = f"the least {what} of the {len(meets)} point(s) that train within {days:g} days"
    return Pick(limit=days, gpu=best.gpu, gpus=best.gpus, why=why)


def soonest_within(points: Sequence[FrontierPoint], budget: float) -> Pick:
    """The soonest point (then cheapest, then first asked) whose cost is within `budget`;
    a point without a price is not judged."""
    within = [
        (p.wall_days, p.cost, i)
        for i, p in enumerate(points)
        if p.wall_days is not None and p.cost is not None and p.cost <= budget
    ]
    if not within:
        return Pick(
            limit=budget, gpu=None, gpus=None, why=f"no priced point costs {budget:g} or less"
        )
    best = points[min(within)[2]]
    why = f"the soonest of the {len(within)} priced point(s) that cost {_amount(budget)} or less"
    return Pick(limit=budget, gpu=best.gpu, gpus=best.gpus, why=why)


def _amount(value: float) -> str:
    """`8,000,000`, `2.5`: an amount as typed, with thousands separated."""
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def marked(
    points: Sequence[FrontierPoint],
    unpriced: Sequence[str],
    *,
    days: float | None = None,
    budget: float | None = None,
) -> tuple[list[FrontierPoint], Basis, str | None, Pick | None, Pick | None]:
    """The points with the front marked on the basis `basis_of` gives, that basis and its note,
    and the `days` and `budget` picks (None where not asked)."""
    basis, note = basis_of(points, unpriced)
    pairs = [
        None if p.wall_days is None or (value := p.value(basis)) is None else (p.wall_days, value)
        for p in points
    ]
    front = pareto_front(pairs)
    out = [p.model_copy(update={"on_front": on}) for p, on in zip(points, front, strict=True)]
    deadline = None if days is None else cheapest_within(out, days, basis)
    within = None if budget is None else soonest_within(out, budget)
    return out, basis, note, deadline, within


TABLE_HEADERS = (
    "GPU", "GPUs", "backend", "layout", "step s", "MFU", "days", "GPU-hours", "cost", "marks",
)  # fmt: skip
TABLE_RIGHT = {1, 4, 5, 6, 7, 8}  # the numbers' columns


def point_marks(frontier: Frontier, point: FrontierPoint) -> str:
    """`front`, `days` (the `--days` pick), `budget` (the `--budget` pick), as they apply."""
    marks = ["front"] if point.on_front else []
    for name, pick in (("days", frontier.deadline), ("budget", frontier.budget)):
        if pick is not None and (pick.gpu, pick.gpus) == (point.gpu, point.gpus):
            marks.append(name)
    return " ".join(marks)


def table_rows(frontier: Frontier) -> list[list[str]]:
    """The frontier's table as the text view and frontier.md show it (TABLE_HEADERS): a point
    without a plan has its reason where the layout would be."""
    rows = []
    for p in frontier.points:
        backend = "-" if p.backend is None else f"{p.backend.name} {p.backend.version}"
        figures = ["-"] * 5
        mfu = p.shown_mfu
        if p.step_s is not None and mfu is not None and p.wall_days is not None:
            figures = [f"{p.step_s:.3f}", f"{mfu:.1%}", f"{p.wall_days:,.1f}", "-", "-"]
        if p.gpu_hours is not None:
            figures[3] = f"{p.gpu_hours:,.0f}"
        if p.cost is not None:
            figures[4] = f"{p.cost:,.0f}"
        layout = p.layout_label or f"no plan: {p.reason}"
        if p.backend is not None:  # the backend has its own column
            layout = layout.removeprefix(f"{p.backend.name} ")
        rows.append([p.gpu, str(p.gpus), backend, layout, *figures, point_marks(frontier, p)])
    return rows


def front_line(frontier: Frontier) -> str:
    """What the `front` mark means, on this frontier's basis."""
    basis = "cost" if frontier.basis == "cost" else "GPU-hours"
    note = f" ({frontier.basis_note})" if frontier.basis_note else ""
    return f"front: no other point trains at least as soon for as little {basis}{note}"


def mfu_line(frontier: Frontier) -> str:
    """Which count of the model FLOPs each backend's MFU column is in (its log's: the data file
    parplan_gen/data/mfu_conventions.yaml)."""
    names = dict.fromkeys(
        p.backend.name
        for p in frontier.points
        if p.backend is not None and p.mfu_causal is not None and p.mfu_causal != p.mfu
    )
    said = "; ".join(f"{name}: {backend_convention(name).says}" for name in names)
    return f"MFU in the count each point's backend logs ({said or 'no plan'})"


def pick_lines(frontier: Frontier) -> list[str]:
    """`days: b200 x 512: the least cost of ...` for each pick asked, or why none was made."""
    lines = []
    for name, pick in (("days", frontier.deadline), ("budget", frontier.budget)):
        if pick is not None:
            where = "" if pick.gpu is None else f"{pick.gpu} x {pick.gpus}: "
            lines.append(f"{name}: {where}{pick.why}")
    return lines


def to_json(frontier: Frontier) -> str:
    """frontier.json's text: the same frontier always gives the same bytes."""
    data = frontier.model_dump(mode="json")
    return json.dumps(data, indent=JSON_INDENT, ensure_ascii=False, allow_nan=False) + "\n"
