"""Load rule directories into one compiled RuleSet.

Layers: the built-in `rules/` first, then each `--rules DIR` in order. Within a layer every rule
id and named formula is defined once; a later layer replaces a rule with the same id (in the
place the original had) or adds new ones, and may redefine a named formula. All formulas are
compiled here, once; the engine only evaluates them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parplan_gen.errors import RuleError, SourceRef
from parplan_gen.formulas import Formula, FormulaLibrary, TextTemplate
from parplan_gen.graph import canonical_op
from parplan_gen.resources import builtin_rules_dir
from parplan_gen.rules_schema import ConstraintRule, OpportunityRule, ProposalRule, RuleFile
from parplan_gen.source import Document, load_document
from parplan_gen.validation import validate

BUILTIN_LAYER = "built-in"
SETTING_KEY = r"^[a-z][a-z0-9_]*$"


@dataclass(frozen=True)
class RuleOrigin:
    """Where a rule was defined: its file position and the layer it came from."""

    where: SourceRef
    layer: str


@dataclass(frozen=True)
class CompiledOpportunity:
    """An opportunity rule with every field compiled."""

    rule: OpportunityRule
    origin: RuleOrigin
    op: str | None  # canonical op, "*" or None for graph rules
    when: Formula
    min_devices: Formula
    memory_per_device: Formula
    communication_overhead: Formula
    speedup: Formula


@dataclass(frozen=True)
class CompiledProposal:
    """A proposal rule with every field compiled."""

    rule: ProposalRule
    origin: RuleOrigin
    when: Formula
    speedup: Formula
    settings: dict[str, Formula]
    description: TextTemplate


@dataclass(frozen=True)
class CompiledConstraint:
    """A constraint rule with its condition, requirement and reason compiled."""

    rule: ConstraintRule
    origin: RuleOrigin
    when: Formula
    require: Formula
    reason: TextTemplate


@dataclass(frozen=True)
class EstimateFormula:
    """One figure of the cost model (e.g. memory.params) and the formula that gives it."""

    section: str  # "memory" | "time" | "throughput"
    key: str
    formula: Formula
    origin: RuleOrigin


@dataclass(frozen=True)
class Override:
    """A rule or named formula of one layer replaced by a later layer."""

    id: str
    replaced: RuleOrigin
    by: RuleOrigin


@dataclass(frozen=True)
class RuleSet:
    """Everything the engine needs: compiled rules in order, and where each came from."""

    library: FormulaLibrary
    opportunities: tuple[CompiledOpportunity, ...]
    proposals: tuple[CompiledProposal, ...]
    layers: tuple[str, ...]
    overrides: tuple[Override, ...] = field(default=())
    constraints: tuple[CompiledConstraint, ...] = field(default=())
    estimate: tuple[EstimateFormula, ...] = field(default=())

    @property
    def named_ops(self) -> frozenset[str]:
        """Ops that have node rules of their own (the `*` rules apply to every other op)."""
        return frozenset(o.op for o in self.opportunities if o.op not in (None, "*"))


@dataclass
class _Entry:
    kind: str  # "opportunity" | "proposal" | "constraint"
    section: str  # "opportunities" | "proposals" | "constraints"
    rule: OpportunityRule | ProposalRule | ConstraintRule
    doc: Document
    path: tuple[str | int, ...]
    origin: RuleOrigin


@dataclass
class _Merged:
    rules: dict[str, _Entry] = field(default_factory=dict)
    formulas: dict[str, tuple[Any, RuleOrigin]] = field(default_factory=dict)
    overrides: list[Override] = field(default_factory=list)
    estimate: dict[tuple[str, str], tuple[Any, RuleOrigin]] = field(default_factory=dict)


def load_rules(extra_dirs: Sequence[str | Path] = (), *, builtin: bool = True) -> RuleSet:
    """Load the built-in rules (unless `builtin` is False) and layer `extra_dirs` over them."""
    layers: list[tuple[str, Path]] = [(BUILTIN_LAYER, builtin_rules_dir())] if builtin else []
    layers += [(str(d), Path(d)) for d in extra_dirs]
    merged = _Merged()
    for layer, directory in layers:
        _merge_layer(merged, layer, [load_rule_file(p) for p in rule_files(directory)])
    return _compile(merged, tuple(name for name, _ in layers))


def rule_files(directory: Path) -> list[Path]:
    """The rule files of a directory, recursively, in a stable (sorted) order."""
    if not directory.is_dir():
        raise RuleError("rules directory not found", SourceRef(str(directory)))
    found = [p for p in directory.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()]
    return sorted(found, key=lambda p: p.relative_to(directory).as_posix())


def load_rule_file(path: Path) -> tuple[Document, RuleFile]:
    """Parse and validate one rule file."""
    doc = load_document(path)
    data = {} if doc.data is None else doc.data
    if not isinstance(data, dict):
        raise RuleError(
            "a rule file must be a mapping (formulas, opportunities, proposals)", doc.ref(())
        )
    return doc, validate(RuleFile, data, doc, error=RuleError)


def _merge_layer(merged: _Merged, layer: str, files: list[tuple[Document, RuleFile]]) -> None:
    seen_rules: dict[str, RuleOrigin] = {}
    seen_formulas: dict[str, RuleOrigin] = {}
    for doc, parsed in files:
        for name, value in parsed.formulas.items():
            origin = RuleOrigin(doc.ref(("formulas", name)), layer)
            _refuse_duplicate(seen_formulas, name, origin, "named formula")
            if name in merged.formulas:
                merged.overrides.append(Override(name, merged.formulas[name][1], origin))
            merged.formulas[name] = (value, origin)
        sections = (
            ("opportunity", "opportunities", parsed.opportunities),
            ("proposal", "proposals", parsed.proposals),
            ("constraint", "constraints", parsed.constraints),
        )
        for kind, section, rules in sections:
            for index, rule in enumerate(rules):
                path = (section, index)
                origin = RuleOrigin(doc.ref(path), layer)
                _refuse_duplicate(seen_rules, rule.id, origin, "rule id")
                old = merged.rules.get(rule.id)
                if old is not None and old.kind != kind:
                    raise RuleError(
                        f"rule '{rule.id}' is under `{section}` here but under `{old.section}` at "
                        f"{old.origin.where}; an override must keep the kind",
                        origin.where,
                    )
                if old is not None:
                    merged.overrides.append(Override(rule.id, old.origin, origin))
                merged.rules[rule.id] = _Entry(kind, section, rule, doc, path, origin)
        _merge_estimate(merged, layer, doc, parsed, seen_formulas)


def _merge_estimate(
    merged: _Merged, layer: str, doc: Document, parsed: RuleFile, seen: dict[str, RuleOrigin]
) -> None:
    """Estimate figures merge key by key: a later layer may replace one figure."""
    if parsed.estimate is None:
        return
    for section in ("memory", "time", "throughput"):
        for key, value in getattr(parsed.estimate, section).items():
            origin = RuleOrigin(doc.ref(("estimate", section, key)), layer)
            _refuse_duplicate(seen, f"estimate.{section}.{key}", origin, "estimate figure")
            old = merged.estimate.get((section, key))
            if old is not None:
                merged.overrides.append(Override(f"estimate.{section}.{key}", old[1], origin))
            merged.estimate[(section, key)] = (value, origin)


def _refuse_duplicate(seen: dict[str, RuleOrigin], key: str, origin: RuleOrigin, what: str) -> None:
    if key in seen:
        raise RuleError(
            f"duplicate {what} '{key}' (first defined at {seen[key].where})", origin.where
        )
    seen[key] = origin


def _compile(merged: _Merged, layers: tuple[str, ...]) -> RuleSet:
    library = FormulaLibrary({n: (v, o.where) for n, (v, o) in merged.formulas.items()})
    opportunities: list[CompiledOpportunity] = []
    proposals: list[CompiledProposal] = []
    constraints: list[CompiledConstraint] = []
    for entry in merged.rules.values():
        if entry.kind == "opportunity":
            opportunities.append(_compile_opportunity(library, entry))
        elif entry.kind == "proposal":
            proposals.append(_compile_proposal(library, entry))
        else:
            constraints.append(_compile_constraint(library, entry))
    estimate = tuple(
        EstimateFormula(section, key, library.compile(value, o.where, "estimate", "number"), o)
        for (section, key), (value, o) in merged.estimate.items()
    )
    return RuleSet(
        library,
        tuple(opportunities),
        tuple(_in_group_order(proposals)),
        layers,
        tuple(merged.overrides),
        tuple(constraints),
        estimate,
    )


def _compile_constraint(library: FormulaLibrary, entry: _Entry) -> CompiledConstraint:
    rule = entry.rule
    assert isinstance(rule, ConstraintRule)

    def ref(key: str) -> SourceRef:
        return entry.doc.ref((*entry.path, key))

    return CompiledConstraint(
        rule=rule,
        origin=entry.origin,
        when=library.compile(rule.when, ref("when"), "constraint", "bool"),
        require=library.compile(rule.require, ref("require"), "constraint", "bool"),
        reason=library.compile_text(rule.reason, ref("reason"), "constraint"),
    )


def _compile_opportunity(library: FormulaLibrary, entry: _Entry) -> CompiledOpportunity:
    rule = entry.rule
    assert isinstance(rule, OpportunityRule)
    context = rule.scope

    def field_formula(name: str, expect: str) -> Formula:
        where = entry.doc.ref((*entry.path, name))
        return library.compile(getattr(rule, name), where, context, expect)

    op = None if rule.op is None else ("*" if rule.op == "*" else canonical_op(rule.op))
    return CompiledOpportunity(
        rule=rule,
        origin=entry.origin,
        op=op,
        when=field_formula("when", "bool"),
        min_devices=field_formula("min_devices", "number"),
        memory_per_device=field_formula("memory_per_device", "number"),
        communication_overhead=field_formula("communication_overhead", "number"),
        speedup=field_formula("speedup", "number"),
    )


def _compile_proposal(library: FormulaLibrary, entry: _Entry) -> CompiledProposal:
    rule = entry.rule
    assert isinstance(rule, ProposalRule)

    def ref(*keys: str) -> SourceRef:
        return entry.doc.ref((*entry.path, *keys))

    settings: dict[str, Formula] = {}
    for key, value in rule.settings.items():
        if not re.match(SETTING_KEY, key):
            raise RuleError(f"setting name '{key}' must match {SETTING_KEY}", ref("settings", key))
        settings[key] = library.compile(value, ref("settings", key), "proposal")
    return CompiledProposal(
        rule=rule,
        origin=entry.origin,
        when=library.compile(rule.when, ref("when"), "proposal", "bool"),
        speedup=library.compile(rule.speedup, ref("speedup"), "proposal", "number"),
        settings=settings,
        description=library.compile_text(
            rule.description, ref("description"), "proposal_description"
        ),
    )


def _in_group_order(proposals: list[CompiledProposal]) -> list[CompiledProposal]:
    """Groups in order of first appearance; rules keep their order inside a group."""
    order: dict[str, int] = {}
    for p in proposals:
        order.setdefault(p.rule.group, len(order))
    return sorted(proposals, key=lambda p: order[p.rule.group])
