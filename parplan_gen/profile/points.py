"""A profile as a list of points, measured in order within the budget.

Each sweep module turns its sizes into `Point`s (a curve, a label for the progress line, and the
call that measures it), so the run knows its length before it starts. `measure_points` runs
them: a point starts only while its sweep's budget allows (with several ranks, as rank 0
decides, so every rank runs the same collectives); on one device, a point that fails (out of
memory, an operation the device does not run) is recorded as skipped, and the run goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel

from parplan_gen.cost.measured import Skipped
from parplan_gen.profile.budget import Budget, Progress
from parplan_gen.profile.runtime import Device, reason_of


@dataclass(frozen=True)
class Point:
    """One measurement: `curve` is where it goes (`gemm.bf16`, `attention`, `memory`,
    `collectives.all_reduce`), `sweep` whose budget it uses."""

    sweep: str
    curve: str
    label: str
    measure: Callable[[], BaseModel]


@dataclass
class Results:
    """The points measured, by curve in measuring order, and what was skipped."""

    curves: dict[str, list[BaseModel]] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)

    def skip(self, sweep: str, reason: str) -> None:
        self.skipped.append(Skipped(sweep=sweep, reason=reason))


def measure_points(
    points: list[Point],
    device: Device,
    budget: Budget,
    progress: Progress,
    results: Results,
    agree: Callable[[bool], bool] | None = None,
) -> None:
    """Measure `points` into `results`. Alone (`agree` None), a point that fails on the device
    (`Device.point_failures`: out of memory, an operation it does not run) is recorded as
    skipped, with torch's reason, and the next one runs. Among ranks, `agree` turns this
    rank's "may start" into every rank's (rank 0's word), and a failure ends the sweep: the
    ranks would no longer run the same collectives."""
    left_out: dict[str, int] = {}
    tolerated = device.point_failures() if agree is None else ()
    for point in points:
        results.curves.setdefault(point.curve, [])
        allowed = budget.allows(point.sweep)
        if not (allowed if agree is None else agree(allowed)):
            left_out[point.curve] = left_out.get(point.curve, 0) + 1
            continue
        progress.step(point.label)
        try:
            results.curves[point.curve].append(point.measure())
        except tolerated as exc:
            results.skip(point.curve, f"{point.label}: {reason_of(exc)}")
        finally:
            device.free()
    for curve, count in left_out.items():
        results.skip(curve, budget.left_out(count))
