"""What a profile is asked for (`parplan profile` flags, `parplan_gen.measure` parameters), and
the level of sweeps and the budget that follow from it (profile_sweeps.yaml `levels`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from parplan_gen.inputs.errors import UsageError, shown_value
from parplan_gen.inputs.source import is_finite_number
from parplan_gen.profile.sweeps import Level, LevelName, sweeps

DeviceKind = Literal["cuda", "cpu"]
DEVICES: tuple[DeviceKind, ...] = ("cuda", "cpu")


@dataclass(frozen=True)
class ProfileOptions:
    """`device`: cuda or cpu (a tiny profile that checks the machinery); `quick`: the shorter
    sweeps; `gpu`: the catalog GPU the file names (default: the device's own name, looked up);
    `budget_s`: the time allowed (default: the level's)."""

    device: DeviceKind = "cuda"
    quick: bool = False
    gpu: str | None = None
    budget_s: float | None = None

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            choices = ", ".join(DEVICES)
            raise UsageError(f"--device: expected one of {choices}, got {shown_value(self.device)}")
        budget = self.budget_s
        if budget is not None and not (is_finite_number(budget) and budget > 0):
            raise UsageError(f"--budget-s: expected seconds above 0, got {shown_value(budget)}")

    @property
    def level_name(self) -> LevelName:
        if self.device == "cpu":
            return "cpu"
        return "quick" if self.quick else "full"

    @property
    def level(self) -> Level:
        return sweeps().levels[self.level_name]

    @property
    def budget(self) -> float:
        """Seconds the sweeps may take."""
        return self.level.budget_s if self.budget_s is None else float(self.budget_s)
