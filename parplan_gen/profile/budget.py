"""The time a profile may take, shared between its sweeps, and the progress line.

Each sweep may run until its deadline: the start plus its share of the budget and the shares
of the sweeps before it (`budget_shares` in profile_sweeps.yaml), so time a sweep leaves unused
passes to the next. A point is started only before its sweep's deadline; the points left are
recorded as not measured, and the run as stopped early.

The progress line (one counter, rewritten in place) goes to stderr only when stderr is a
terminal: nothing when it is a file or a pipe.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from parplan_gen.profile.sweeps import SWEEPS

SECONDS_PER_MINUTE = 60


class Budget:
    """Deadlines of the sweeps, and whether any point was left out for lack of time."""

    def __init__(self, budget_s: float, shares: dict[str, float]) -> None:
        self.budget_s = budget_s
        self.start = time.monotonic()
        self.stopped_early = False
        self._deadline: dict[str, float] = {}
        total = 0.0
        for sweep in SWEEPS:
            total += shares[sweep]
            self._deadline[sweep] = self.start + budget_s * total

    def allows(self, sweep: str) -> bool:
        """Whether a point of `sweep` may start now."""
        return time.monotonic() < self._deadline[sweep]

    def left_out(self, count: int) -> str:
        """Record that `count` points were not measured; the reason."""
        self.stopped_early = True
        return f"{count} point(s) not measured: the budget of {self.budget_s:g} s ran out"

    def remaining_s(self) -> float:
        return max(0.0, self.start + self.budget_s - time.monotonic())


class Progress:
    """`profile: gemm bf16 m=4096 n=4096 k=4096  [12/87]  9m40s left`, on a terminal only."""

    def __init__(
        self, total: int, budget: Budget, stream: TextIO | None = None, shown: bool | None = None
    ) -> None:
        """`shown`: None, when `stream` (default stderr) is a terminal."""
        self.total = total
        self.done = 0
        self.budget = budget
        self.stream = sys.stderr if stream is None else stream
        self.shown = self.stream.isatty() if shown is None else shown

    def step(self, label: str) -> None:
        """A point is about to be measured."""
        self.done += 1
        if self.shown:
            minutes, seconds = divmod(int(self.budget.remaining_s()), SECONDS_PER_MINUTE)
            line = f"profile: {label}  [{self.done}/{self.total}]  {minutes}m{seconds:02d}s left"
            self.stream.write("\r\x1b[2K" + line)
            self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
