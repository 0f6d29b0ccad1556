"""The step time a candidate must beat to rank, for the search's pruning by `time.floor_s`
(planning/backend_planner.py module docstring): the K-th best step of the plans found before
it, on every backend searched so far (K plans are faster than a candidate whose floor is
slower), and for a candidate without context parallelism no less than the best step without
it found before, so that the best layout without it is exact. The planner shares one
StepCutoff among the backends it searches in turn. Steps only improve as the search goes on,
so a verdict given earlier stays true."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field


@dataclass
class StepCutoff:
    """The steps of the candidates that fit, as the searches find them."""

    top: int  # K: the candidates the planner ranks
    _best: list[float] = field(default_factory=list)  # the K best steps, negated
    _best_no_cp: float | None = None

    def add(self, step: float, cp: int) -> None:
        """Count the step of a candidate that fits (with context parallelism of `cp`)."""
        heapq.heappush(self._best, -step)
        if len(self._best) > self.top:
            heapq.heappop(self._best)
        if cp == 1 and (self._best_no_cp is None or step < self._best_no_cp):
            self._best_no_cp = step

    def now(self, without_cp: bool) -> float | None:
        """The step a candidate's floor must not exceed to rank (None: any ranks)."""
        if len(self._best) < self.top:
            return None
        kth = -self._best[0]
        if not without_cp:
            return kth
        return None if self._best_no_cp is None else max(kth, self._best_no_cp)
