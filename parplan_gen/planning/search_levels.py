"""The levels of the planner's search (structure -> vpp -> micro-batch -> memory option): the
plan names each level sets, and for each layout rule the level at which it can be checked (the
deepest of the plan names it reads) and what its rejections are told apart by.
`backend_planner` runs the search.
"""

from __future__ import annotations

from typing import NamedTuple

from parplan_gen.inputs.errors import RuleError
from parplan_gen.planning.constraints import names_read
from parplan_gen.planning.search_space import MemoryOption, Structure
from parplan_gen.rules.ruleset import CompiledConstraint

STRUCTURE, VIRTUAL, MICRO, MEMORY = range(4)  # search levels
# The plan.* names each level sets: a Structure, vpp, the micro-batch split, a MemoryOption.
STRUCTURE_NAMES, MEMORY_NAMES = (
    tuple(f"plan.{f}" for f in t._fields) for t in (Structure, MemoryOption)
)
LEVEL_OF: dict[str, int] = {
    **dict.fromkeys(STRUCTURE_NAMES, STRUCTURE),
    "plan.vpp": VIRTUAL,
    **dict.fromkeys(("plan.mbs", "plan.grad_accum"), MICRO),
    **dict.fromkeys(MEMORY_NAMES, MEMORY),
}


def plan_names(constraint: CompiledConstraint) -> tuple[str, ...]:
    """The plan.* names a rule reads, sorted."""
    return tuple(sorted(n for n in names_read(constraint) if n.startswith("plan.")))


class RuleCase(NamedTuple):
    """What a rule's rejection cases are told apart by (read from the environment when it
    rejects): the plan names it reads, and with them the names its reason reads."""

    plan_names: tuple[str, ...]
    names: tuple[str, ...]  # the reason's names, then the plan names
    fields: tuple[str, ...]  # the plan names without their `plan.` prefix


def rule_case(constraint: CompiledConstraint) -> RuleCase:
    names = plan_names(constraint)
    fields = tuple(n.removeprefix("plan.") for n in names)
    return RuleCase(names, (*sorted(constraint.reason.names), *names), fields)


def rule_level(constraint: CompiledConstraint) -> int:
    """The level at which a layout rule is checked: the deepest of the plan names it reads; a
    RuleError when it reads one the planner does not set."""
    names = plan_names(constraint)
    unknown = [n for n in names if n not in LEVEL_OF]
    if unknown:
        raise RuleError(
            f"constraint '{constraint.rule.id}' reads {', '.join(unknown)}, which the planner "
            "does not set",
            constraint.origin.where,
        )
    return max((LEVEL_OF[n] for n in names), default=STRUCTURE)


def check_bound(constraint: CompiledConstraint, level: int) -> None:
    """A rule that bounds the search reads the plan names of one level besides the layout's
    sizes (the structure), so that it filters that level's values alone; a RuleError else."""
    names = [n for n in plan_names(constraint) if LEVEL_OF[n] not in (STRUCTURE, level)]
    if names:
        raise RuleError(
            f"constraint '{constraint.rule.id}' bounds the search (bounds_search) but reads "
            f"{', '.join(names)} beside its own level's plan names: split it, or drop "
            "bounds_search",
            constraint.origin.where,
        )
