"""Run a RuleSet over a ModelGraph: opportunities per node, proposals per graph and cluster.

Opportunities follow the seed's `analyze_parallelization_opportunities`: node rules for every
node in file order (rules in rule order), then graph rules; a stable sort by speedup, highest
first; the first (best) opportunity of each node_id kept. Proposals run group by group.

`analyze` and `propose` take an optional `trace` callback that sees every rule evaluated, the
values it read and what it produced (None: its `when` was false); `parplan rules explain` is
built on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field

from parplan_gen.inputs.errors import FormulaError
from parplan_gen.models.graph import ModelGraph
from parplan_gen.models.graph_node import Node
from parplan_gen.rules.formula_runtime import Formula
from parplan_gen.rules.ruleset import CompiledOpportunity, CompiledProposal, RuleSet

SettingValue = bool | int | float | str


# Opportunities are plain slotted dataclasses, not pydantic models: the engine builds one per
# node (100,000 for a large graph) from values it computed itself, so there is nothing to
# validate, and a pydantic object costs ~20x more to make.
@dataclass(frozen=True, slots=True)
class ResourceRequirements:
    """What an opportunity needs."""

    min_devices: int
    memory_per_device: int  # bytes
    communication_overhead: float  # fraction of step time

    def as_dict(self) -> dict[str, Any]:
        """The JSON contract's `resource_requirements` object."""
        return {
            "min_devices": self.min_devices,
            "memory_per_device": self.memory_per_device,
            "communication_overhead": self.communication_overhead,
        }


@dataclass(frozen=True, slots=True)
class Opportunity:
    """One way to parallelise one node (or, for graph rules, the whole graph)."""

    node_id: str
    type: str
    estimated_speedup: float
    resource_requirements: ResourceRequirements
    rule_id: str  # not part of the JSON contract; used by explanations

    def for_node(self, node_id: str) -> Opportunity:
        """The same opportunity for another node."""
        return Opportunity(
            node_id, self.type, self.estimated_speedup, self.resource_requirements, self.rule_id
        )

    def as_dict(self) -> dict[str, Any]:
        """The JSON contract's opportunity object (DESIGN.md, seed parity)."""
        return {
            "node_id": self.node_id,
            "type": self.type,
            "estimated_speedup": self.estimated_speedup,
            "resource_requirements": self.resource_requirements.as_dict(),
        }


class Proposal(BaseModel):
    """A strategy for the whole graph and cluster, with the settings it contributes; plan.json
    keeps each one whole, `propose --json` without `rule_id` and `group`."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    rule_id: str = Field(description="The rule that made it, e.g. `seed.communication.overlap`.")
    group: str = Field(description="data | pipeline | tensor | communication | ...")
    type: str = Field(description="DataParallel | ... | CommunicationOptimization")
    description: str
    estimated_speedup: float
    settings: dict[str, SettingValue] = Field(description="What the proposal contributes.")


def graph_env(graph: ModelGraph, names: Iterable[str]) -> dict[str, Any]:
    """Values of the graph.* names among `names`."""
    stats = graph.stats
    fixed = {
        "graph.node_count": stats.node_count,
        "graph.edge_count": stats.edge_count,
        "graph.depth": stats.depth,
    }
    env: dict[str, Any] = {}
    for name in names:
        if name in fixed:
            env[name] = fixed[name]
        elif name.startswith("graph.op_count."):
            env[name] = stats.op_counts.get(name.removeprefix("graph.op_count."), 0)
        elif name.startswith("graph.sum."):
            env[name] = stats.attr_sums.get(name.removeprefix("graph.sum."), 0)
    return env


def node_env(graph: ModelGraph, node: Node, index: int, names: Iterable[str]) -> dict[str, Any]:
    """Values of the node.* names among `names` for `node` (absent attributes stay absent)."""
    env: dict[str, Any] = {}
    for name in names:
        if name == "node.index":
            env[name] = index
        elif name == "node.in_degree":
            env[name] = graph.in_degree(node.id)
        elif name == "node.out_degree":
            env[name] = graph.out_degree(node.id)
        elif name == "node.level":
            env[name] = graph.level(node.id)
        elif name.startswith("node.has."):
            env[name] = _is_number(node.attrs.get(name.removeprefix("node.has.")))
        elif name.startswith("node.attr."):
            value = node.attrs.get(name.removeprefix("node.attr."))
            if _is_number(value):
                env[name] = value
    return env


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _names(formulas: Iterable[Formula]) -> frozenset[str]:
    return frozenset().union(*(f.names for f in formulas))


def _opportunity_formulas(rule: CompiledOpportunity) -> tuple[Formula, ...]:
    return (
        rule.when,
        rule.min_devices,
        rule.memory_per_device,
        rule.communication_overhead,
        rule.speedup,
    )


# (rule, node_id, the values it could read, the opportunity or None when `when` was false)
OpportunityTrace = Callable[[CompiledOpportunity, str, Mapping[str, Any], Opportunity | None], None]
# (rule, the values it could read, the proposal or None when `when` was false)
ProposalTrace = Callable[[CompiledProposal, Mapping[str, Any], Proposal | None], None]


def analyze(
    graph: ModelGraph, rules: RuleSet, trace: OpportunityTrace | None = None
) -> list[Opportunity]:
    """The seed's opportunity analysis, driven by `rules`."""
    all_names = _names(f for r in rules.opportunities for f in _opportunity_formulas(r))
    base = graph_env(graph, all_names)
    node_rules: dict[str, list[_Prepared]] = {}
    for rule in rules.opportunities:
        if rule.op is not None:
            node_rules.setdefault(rule.op, []).append(_Prepared(rule, base))
    node_names = [n for n in all_names if n.startswith("node.")]
    # Ops whose rules read no node.* name give every node the same best opportunity: work it
    # out at the first such node, then copy it (not when tracing: explain shows every rule).
    # `shared` is keyed by the node's own op, so that its nodes take one look-up each.
    shared: dict[str, Opportunity | None] = {}
    fixed_ops = set() if trace is not None else _node_independent_ops(node_rules)
    found: list[Opportunity] = []
    for index, node in enumerate(graph.nodes):
        if node.op in shared:
            best = shared[node.op]
            if best is not None:
                found.append(best.for_node(node.id))
            continue
        op = node.op if node.op in node_rules else "*"
        matching = node_rules.get(op, [])
        if op in fixed_ops:
            fired = [o for o in (p.fire(base, node.id) for p in matching) if o is not None]
            best = shared[node.op] = best_per_node(fired)[0] if fired else None
            if best is not None:
                found.append(best.for_node(node.id))
            continue
        env = {**base, **node_env(graph, node, index, node_names)} if node_names else base
        for prepared in matching:
            opportunity = prepared.fire(env, node.id)
            if trace is not None:
                trace(prepared.rule, node.id, env, opportunity)
            if opportunity is not None:
                found.append(opportunity)
    for rule in rules.opportunities:
        if rule.op is None:
            node_id = rule.rule.node_id or rule.rule.id
            opportunity = _Prepared(rule, base).fire(base, node_id)
            if trace is not None:
                trace(rule, node_id, base, opportunity)
            if opportunity is not None:
                found.append(opportunity)
    return best_per_node(found)


def _node_independent_ops(node_rules: Mapping[str, list[_Prepared]]) -> set[str]:
    """Ops none of whose rules read a node.* name."""
    return {op for op, rules in node_rules.items() if not any(p.node_dependent for p in rules)}


_SPEEDUP = attrgetter("estimated_speedup")


def best_per_node(found: list[Opportunity]) -> list[Opportunity]:
    """Stable sort by speedup (highest first), then keep the first opportunity of each node.
    (A reversed sort is stable too; speedups are finite, as every formula result is.)"""
    ranked = sorted(found, key=_SPEEDUP, reverse=True)
    seen: set[str] = set()
    kept = []
    for opportunity in ranked:
        if opportunity.node_id not in seen:
            seen.add(opportunity.node_id)
            kept.append(opportunity)
    return kept


class _Prepared:
    """An opportunity rule whose node-independent formulas are evaluated once, when first needed.

    Evaluation is lazy so that a formula guarded by `when` (e.g. `1 / graph.depth` under
    `graph.depth > 4`) is never evaluated where the condition is false.
    """

    _FIELDS = ("when", "min_devices", "memory_per_device", "communication_overhead", "speedup")

    def __init__(self, rule: CompiledOpportunity, base: Mapping[str, Any]) -> None:
        self.rule = rule
        self.base = base
        self.fixed: dict[str, Any] = {}
        self.node_dependent = {
            name
            for name in self._FIELDS
            if any(n.startswith("node.") for n in getattr(rule, name).names)
        }

    def _value(self, name: str, env: Mapping[str, Any], node_id: str) -> Any:
        if name in self.fixed:
            return self.fixed[name]
        formula: Formula = getattr(self.rule, name)
        try:
            value = formula.evaluate(env)
        except FormulaError as exc:
            on = f" on node '{node_id}'" if name in self.node_dependent else ""
            raise FormulaError(
                f"rule '{self.rule.rule.id}'{on}: {exc.message}", exc.where
            ) from None
        if name not in self.node_dependent:
            self.fixed[name] = value
        return value

    def fire(self, env: Mapping[str, Any], node_id: str) -> Opportunity | None:
        if not self._value("when", env, node_id):
            return None
        requirements = ResourceRequirements(
            min_devices=int(self._value("min_devices", env, node_id)),
            memory_per_device=int(self._value("memory_per_device", env, node_id)),
            communication_overhead=float(self._value("communication_overhead", env, node_id)),
        )
        return Opportunity(
            node_id=node_id,
            type=self.rule.rule.type,
            estimated_speedup=float(self._value("speedup", env, node_id)),
            resource_requirements=requirements,
            rule_id=self.rule.rule.id,
        )


def propose_env(devices: int) -> dict[str, Any]:
    """Values of the cluster.* names for `propose --devices N`."""
    return {"cluster.devices": devices}


def propose(
    graph: ModelGraph, rules: RuleSet, devices: int, trace: ProposalTrace | None = None
) -> list[Proposal]:
    """The seed's proposals (data, pipeline, tensor, communication, ...), driven by `rules`."""
    names = _names(
        f for r in rules.proposals for f in (r.when, r.speedup, *r.settings.values())
    ) | frozenset().union(*(r.description.names for r in rules.proposals))
    env = {**graph_env(graph, names), **propose_env(devices)}
    made = []
    for rule in rules.proposals:
        proposal = _make(rule, env)
        if trace is not None:
            trace(rule, env, proposal)
        if proposal is not None:
            made.append(proposal)
    return made


def _make(rule: CompiledProposal, env: dict[str, Any]) -> Proposal | None:
    try:
        if not rule.when.evaluate(env):
            return None
        # compiled as a number formula: its value is an int or a float
        speedup = float(cast(float, rule.speedup.evaluate(env)))
        settings = {key: f.evaluate(env) for key, f in rule.settings.items()}
        text_env = {**env, "speedup": speedup}
        text_env.update({f"settings.{k}": v for k, v in settings.items()})
        description = rule.description.render(text_env)
    except FormulaError as exc:
        raise FormulaError(f"proposal '{rule.rule.id}': {exc.message}", exc.where) from None
    return Proposal(
        type=rule.rule.type,
        description=description,
        estimated_speedup=speedup,
        settings=settings,
        rule_id=rule.rule.id,
        group=rule.rule.group,
    )
