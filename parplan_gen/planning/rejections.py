"""Rejected candidates, counted by the rule that rejected them.

The search (`backend_planner`) counts every candidate it does not rank under the first rule
that removed it. Each distinct case is a `Refusal` (the rule, its reason, the values of the plan
fields the rule reads), made once and memoised, and counted in a Counter keyed by the object
itself, so that counting a whole subtree costs one increment. `tally` folds a search's cases
into one `Rejection` per rule: how many layouts, the rule's reason for the first of them, and
the lowest and highest value of each plan field it reads over the layouts it rejected. The
planner merges the backends' rejections (`merge`); the plan document keeps each as its
one-line `label`: `key/value heads (8) do not divide by tp (16) [parallel.kv_heads_divisible_by_tp:
tp 16..128]`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict

from parplan_gen.planning.search_space import RECOMPUTE

PlanValue = int | bool | str  # a plan field's value (cost.layout.PLAN_FIELDS)


class Refusal:
    """One case of a search's rejections: the rule (None: the search's own pruning), its reason
    for the case, and the values of the plan fields the rule reads (named by `fields`).
    Compared and hashed by identity: each case is made once."""

    __slots__ = ("fields", "reason", "rule", "values")

    def __init__(
        self,
        rule: str | None,
        reason: str,
        fields: tuple[str, ...] = (),
        values: tuple[PlanValue, ...] = (),
    ) -> None:
        self.rule, self.reason, self.fields, self.values = rule, reason, fields, values


class Rejection(BaseModel):
    """The candidates one rule rejected: how many, why, and over which values."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    rule: str | None  # the constraint rule's id; None: the search's own pruning
    layouts: int  # candidates it rejected
    reason: str  # as the rule words it for the first candidate it rejected
    # Each plan field the rule reads: its lowest and highest value over the candidates rejected.
    ranges: dict[str, tuple[PlanValue, PlanValue]]

    @property
    def label(self) -> str:
        """`reason [rule id: field low..high, ...]`, naming the fields that took more than one
        value (the reason is the first candidate's); the search's own pruning: its reason."""
        if self.rule is None:
            return self.reason
        varied = [
            f"{f} {_shown(lo)}..{_shown(hi)}" for f, (lo, hi) in self.ranges.items() if lo != hi
        ]
        where = f"{self.rule}: {', '.join(varied)}" if varied else self.rule
        return f"{self.reason} [{where}]"


def tally(counts: Counter[Refusal]) -> list[Rejection]:
    """One Rejection per rule of a search's counted cases, the most layouts first (ties: the
    rule met first). Plain lists while counting: a search has thousands of cases."""
    groups: dict[tuple[str | None, str], tuple[Refusal, list[int], list[tuple[PlanValue, ...]]]]
    groups = {}
    for case, layouts in counts.items():
        key = (case.rule, "" if case.rule is not None else case.reason)
        group = groups.get(key)
        if group is None:
            groups[key] = (case, [layouts], [case.values])
        else:
            group[1][0] += layouts
            group[2].append(case.values)
    return _ranked(
        Rejection(
            rule=case.rule,
            layouts=total[0],
            reason=case.reason,
            ranges={
                f: _span(c) for f, c in zip(case.fields, zip(*values, strict=True), strict=True)
            },
        )
        for case, total, values in groups.values()
    )


def merge(parts: Iterable[Iterable[Rejection]]) -> list[Rejection]:
    """The rejections of several searches (one per backend) as one list, a rule's counts added
    and its ranges joined, the most layouts first (ties: the rule met first)."""
    found: dict[tuple[str | None, str], Rejection] = {}
    for part in parts:
        for one in part:
            key = _key(one)
            found[key] = _joined(found[key], one) if key in found else one
    return _ranked(found.values())


def _key(rejection: Rejection) -> tuple[str | None, str]:
    """A rule's rejections are counted together; the search's own pruning by its reason."""
    return rejection.rule, "" if rejection.rule is not None else rejection.reason


def _joined(first: Rejection, other: Rejection) -> Rejection:
    """`first` with `other`'s layouts added and its ranges joined (the first reason kept)."""
    ranges = dict(first.ranges)
    for field, (lo, hi) in other.ranges.items():
        low, high = ranges.get(field, (lo, hi))
        ranges[field] = (min(low, lo, key=_rank), max(high, hi, key=_rank))
    return first.model_copy(update={"layouts": first.layouts + other.layouts, "ranges": ranges})


def _ranked(rejections: Iterable[Rejection]) -> list[Rejection]:
    return sorted(rejections, key=lambda r: -r.layouts)  # stable: ties keep the order met


def _span(values: tuple[PlanValue, ...]) -> tuple[PlanValue, PlanValue]:
    """The lowest and highest of one field's values (`_rank`'s order)."""
    if isinstance(values[0], str):
        return min(values, key=_rank), max(values, key=_rank)
    return min(values), max(values)  # numbers and switches: their own order


def _rank(value: PlanValue) -> tuple[int, int]:
    """The order of a field's values: numbers (and switches) by size, recomputation from none
    to full (search_space.RECOMPUTE), the order of growing memory savings."""
    if isinstance(value, str):
        return 1, RECOMPUTE.index(value) if value in RECOMPUTE else len(RECOMPUTE)
    return 0, int(value)


def _shown(value: PlanValue) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
