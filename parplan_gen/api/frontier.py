"""`frontier`: one plan per GPU type and count (the same search as `plan`, with the model and
the rules loaded once and shared), each point's days, GPU-hours and cost from its plan's
budget, and the front and the `days` / `budget` picks marked (planning/frontier.py)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from parplan_gen.api.plans import Plan, plan, positive_number
from parplan_gen.api.wording import parameter_wording
from parplan_gen.cost.layout import check_sizes, size_problem
from parplan_gen.cost.mfu_convention import convention_of
from parplan_gen.inputs.errors import InputError, UsageError, shown_value
from parplan_gen.models.any_model import AnyModelSpec
from parplan_gen.models.kind import ANY_BACKEND
from parplan_gen.planning.budget import check_budget_request, request_tokens
from parplan_gen.planning.frontier import Frontier, FrontierPoint, marked
from parplan_gen.planning.frontier_prices import PriceArgument, gpu_type, prices_for
from parplan_gen.planning.loading import load_model, load_ruleset
from parplan_gen.rules.ruleset import RuleSet

# Told after each point is planned: (points done, points in all, the point's GPU and count).
Progress = Callable[[int, int, str], None]
FORK = "fork"  # the start method that shares the loaded model and rules with the workers


@parameter_wording
def frontier(
    model: AnyModelSpec | str | Path,
    gpu: str | Sequence[str],
    gpus: int | Sequence[int],
    *,
    global_batch: int,
    tokens: float | str,
    seq_len: int | None = None,
    gpu_hour_price: PriceArgument = None,
    precision: str = "bf16",
    flash_attention: bool = True,
    backend: str | Sequence[str] = ANY_BACKEND,
    rules: Sequence[str | Path] | RuleSet = (),
    days: float | None = None,
    budget: float | None = None,
    jobs: int = 1,
    progress: Progress | None = None,
) -> Frontier:
    """Plan `model` on every GPU type of `gpu` (catalog names: `"h100"` or `["h100", "b200"]`)
    at every count of `gpus`, training `tokens` (`"15T"`): each point is `plan(..., tokens=...)`
    on `{"gpus": n, "gpu": g}`, so its days and cost are that plan's `document.budget`.
    `gpu_hour_price` is one price for every type, `{"h100": 2.5}` or `"h100=2.5,b200=4.0"` (a
    type left out has none: the front is then drawn on GPU-hours). `days` marks the cheapest
    point that trains within it, `budget` (cost units) the soonest that costs no more. A point
    where nothing runs or fits, or whose count is no whole number of nodes, says why in
    `reason`. `jobs` above 1 plans the points in that many forked processes (where the system
    forks; each shares the loaded model and rules); `progress` is told after each point."""
    types = _gpu_types(gpu)
    counts = _counts(gpus)
    check_sizes(global_batch=global_batch, seq_len=seq_len)
    check_budget_request(tokens, None)
    for name, limit in (("--days", days), ("--budget", budget)):
        _check_limit(name, limit)
    prices = prices_for(gpu_hour_price, types)
    if budget is not None and all(p is None for p in prices.values()):
        raise InputError("--budget: give --gpu-hour-price too (the budget is a cost)")
    ruleset = load_ruleset(rules)
    spec = load_model(model)
    asked: dict[str, Any] = {
        "global_batch": global_batch,
        "seq_len": seq_len,
        "precision": precision,
        "flash_attention": flash_attention,
        "backend": backend,
        "rules": ruleset,
        "tokens": tokens,
    }
    problem = size_problem("gpus", jobs)
    if problem:
        raise InputError(f"--jobs: {problem}")
    work = [(name, count) for name in types for count in counts]
    points = _points(work, (spec, prices, asked), jobs, progress)
    unpriced = [name for name in types if prices[name] is None]
    done, basis, note, deadline, within = marked(points, unpriced, days=days, budget=budget)
    return Frontier(
        model=spec.name,
        title=spec.title,
        global_batch=global_batch,
        seq_len=spec.sequence_length(seq_len),
        tokens=request_tokens(tokens),
        gpu_types=types,
        counts=counts,
        basis=basis,
        basis_note=note,
        deadline=deadline,
        budget=within,
        points=done,
    )


_Shared = tuple[AnyModelSpec, dict[str, float | None], dict[str, Any]]
_SHARED: list[_Shared] = []  # what a forked worker plans with (set before the pool forks)


def _points(
    work: list[tuple[str, int]], shared: _Shared, jobs: int, progress: Progress | None
) -> list[FrontierPoint]:
    """Each (GPU, count) of `work` planned, in order: in `jobs` forked processes where the
    system forks and there is more than one point, else here."""
    points: list[FrontierPoint] = []
    jobs = min(jobs, len(work))
    if jobs > 1 and FORK in multiprocessing.get_all_start_methods():
        _SHARED.append(shared)
        try:
            with multiprocessing.get_context(FORK).Pool(jobs) as pool:
                for point in pool.imap(_shared_point, work):
                    points.append(point)
                    _told(progress, len(points), len(work), point)
        finally:
            _SHARED.clear()
        return points
    for item in work:
        points.append(_point(shared, item))
        _told(progress, len(points), len(work), points[-1])
    return points


def _told(progress: Progress | None, done: int, total: int, point: FrontierPoint) -> None:
    if progress is not None:
        progress(done, total, f"{point.gpu} x {point.gpus}")


def _shared_point(item: tuple[str, int]) -> FrontierPoint:
    """`_point` in a forked worker, with what the parent set before forking."""
    return _point(_SHARED[0], item)


def _point(shared: _Shared, item: tuple[str, int]) -> FrontierPoint:
    """`plan` on `count` x `gpu`, as a point; an input the point cannot take (a count that is no
    whole number of nodes, a search where every layout is invalid) is its `reason`."""
    spec, prices, asked = shared
    gpu, count = item
    price = prices[gpu]
    empty = {
        "backend": None, "layout": None, "layout_label": None, "step_s": None, "mfu": None,
        "wall_days": None, "gpu_hours": None, "gpu_hour_price": price, "cost": None,
    }  # fmt: skip
    try:
        found = plan(spec, {"gpus": count, "gpu": gpu}, gpu_hour_price=price, **asked)
    except (InputError, UsageError) as exc:
        return FrontierPoint(gpu=gpu, gpus=count, feasible=False, reason=exc.render(), **empty)
    budget = found.document.budget
    if not found.feasible or budget is None:
        return FrontierPoint(
            gpu=gpu, gpus=count, feasible=False, reason=_nothing_fits(found), **empty
        )
    chosen = found.chosen
    return FrontierPoint(
        gpu=gpu,
        gpus=count,
        feasible=True,
        reason=None,
        backend=chosen.backend,
        layout=chosen.plan,
        layout_label=_label(found),
        step_s=chosen.time.step_s,
        mfu=chosen.throughput.mfu,
        mfu_causal=chosen.throughput.mfu_causal,
        mfu_convention=convention_of(chosen).attention,
        wall_days=budget.wall_days,
        gpu_hours=budget.gpu_hours,
        gpu_hour_price=budget.gpu_hour_price,
        cost=budget.cost,
    )


def _label(found: Plan) -> str:
    """The chosen layout as plan.md names it (render/labels.py)."""
    from parplan_gen.render.labels import layout_labels

    return layout_labels([found.chosen], found.document.model.layout_dims)[0]


def _nothing_fits(found: Plan) -> str:
    return f"nothing fits in GPU memory ({found.closest_needs()})"


def _gpu_types(gpu: str | Sequence[str]) -> list[str]:
    """The GPU types asked for, by catalog name, each once, in order; a comma list is split."""
    names = gpu.split(",") if isinstance(gpu, str) else list(gpu)
    if not names or any(not isinstance(n, str) or not n.strip() for n in names):
        raise InputError(f"--gpu: expected GPU names (h100,b200), got {shown_value(gpu)}")
    return list(dict.fromkeys(gpu_type(n.strip()) for n in names))


def _counts(gpus: int | Sequence[int]) -> list[int]:
    """The GPU counts asked for, each once, ascending."""
    counts = [gpus] if isinstance(gpus, int) else list(gpus)
    if not counts:
        raise InputError("--gpus: expected GPU counts (64,128,256), got none")
    for count in counts:
        problem = size_problem("gpus", count)
        if problem:
            raise InputError(f"--gpus: {problem}")
    return sorted(set(counts))


def _check_limit(flag: str, value: float | None) -> None:
    """`--days` / `--budget`: a number above 0 when given."""
    if value is not None and not positive_number(value):
        raise InputError(f"{flag}: expected a number above 0, got {shown_value(value)}")
