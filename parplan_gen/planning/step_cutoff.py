"""The step time a candidate must beat to rank, for the search's pruning by `time.floor_s`
(planning/backend_planner.py module docstring): the smaller of the K-th best step of the
backends searched before and the K-th best found so far on the one searched now (either one
has K plans faster than the candidate), and for a candidate without context parallelism no
less than the best step without it found before, so that the best layout without it is
exact. Steps only improve as the search goes on, so a verdict given earlier stays true."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field


@dataclass
class StepCutoff:
    """The steps of the candidates that fit, as the search finds them."""

    top: int  # K: the candidates the search ranks
    before: float | None = None  # the K-th best step of the backends searched before
    before_no_cp: float | None = None  # their best step without context parallelism
    _best: list[float] = field(default_factory=list)  # the K best steps here, negated
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
        here = -self._best[0] if len(self._best) >= self.top else None
        cutoffs = [c for c in (self.before, here) if c is not None]
        if not cutoffs:
            return None
        if not without_cp:
            return min(cutoffs)
        no_cp = [c for c in (self.before_no_cp, self._best_no_cp) if c is not None]
        return max(min(cutoffs), min(no_cp)) if no_cp else None
