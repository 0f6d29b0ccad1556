"""What a search found (`SearchResult`) and how its candidates rank (`ranking_key`): shared by
one backend's search (`backend_planner`), the merge over backends (`planner`) and the views
that compare layouts (render/compare.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from parplan_gen.cost.estimate import Estimate
from parplan_gen.planning.rejections import Rejection
from parplan_gen.planning.search_space import Objective


class Sizes(Protocol):
    """The parallel sizes of a layout (a Layout, or a candidate of the search)."""

    @property
    def dp(self) -> int: ...
    @property
    def tp(self) -> int: ...
    @property
    def pp(self) -> int: ...
    @property
    def cp(self) -> int: ...
    @property
    def ep(self) -> int: ...
    @property
    def vpp(self) -> int: ...


class SearchResult(BaseModel):
    """What one search found, before `api.plan` makes it a plan document: the best K estimates
    (the closest when nothing fits), the rejections by rule and how much was searched."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    candidates: list[Estimate]  # best first; empty only for one backend's part of a search
    rejections: list[Rejection]  # by rule, most first
    feasible: bool  # False: nothing fits; the candidates are the closest, least memory first
    objective: Objective
    searched: int  # candidates in the search space: ranked ones plus every rejected one
    evaluated: int  # candidates the cost model estimated
    # The rules that bound the search (`bounds_search`) and left some layout out of it: each
    # one's reason for the first layout it left out, `[rule id, bounds the search]` (not
    # candidates: not counted).
    bounded: list[str] = []
    # The best candidate with cp 1 when the best has cp > 1 (None otherwise, or when no layout
    # without context parallelism passes): what the plan's context parallelism is worth.
    without_cp: Estimate | None = None

    @property
    def chosen(self) -> Estimate:
        """The best candidate."""
        return self.candidates[0]

    @property
    def rejected(self) -> dict[str, int]:
        """Each rule's rejections as plan.json counts them: label -> candidates, most first."""
        return {r.label: r.layouts for r in self.rejections}


PARALLEL_DIMS = ("dp", "tp", "pp", "vpp", "cp", "ep")  # etp is tensor parallelism


def parallel_dims(plan: Sizes) -> tuple[str, ...]:
    """The layout's parallel dimensions above 1 (`dp`, `tp`, ...): the fewer, the simpler to run
    and to debug; the ranking's last key."""
    return tuple(name for name in PARALLEL_DIMS if getattr(plan, name) > 1)


def ranking_key(
    figures: Mapping[str, float], plan: Sizes, objective: Objective
) -> tuple[float, ...]:
    """Objective first, then the other figure, then fewer parallel dimensions."""
    dims = len(parallel_dims(plan))
    time, memory = figures["time_step_s"], figures["memory_total"]
    return (time, memory, dims) if objective == "time" else (memory, time, dims)
