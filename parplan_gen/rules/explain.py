"""`parplan rules explain`: which rules fired on which node or proposal, and why.

Everything shown comes from the engine's own run (`analyze` and `propose` with a `trace`
callback): the rules the engine tried on each node, the values their formulas read, what they
produced. A condition that failed is shown with the names it read and their values; a top-level
`and`/`or` is split into its parts, each compiled by the same library and evaluated on the same
values, in the order the engine would evaluate them.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from parplan_gen.inputs.errors import FormulaError, InputError, SourceRef
from parplan_gen.inputs.resources import builtin_display_name
from parplan_gen.inputs.safe_text import printable
from parplan_gen.models.graph import ModelGraph
from parplan_gen.rules.engine import Opportunity, Proposal, analyze, propose
from parplan_gen.rules.formula_runtime import Formula
from parplan_gen.rules.layers import RuleOrigin
from parplan_gen.rules.ruleset import CompiledOpportunity, CompiledProposal, RuleSet

_FIELDS = ("min_devices", "memory_per_device", "communication_overhead", "speedup")
_MISSING = object()


def display_where(where: SourceRef) -> str:
    """`file:line`, with the built-in rules shown as `<built-in>/seed/x.yaml:12` (a backend's
    as `<built-in>/backends/megatron/constraints.yaml:12`)."""
    shown = builtin_display_name(Path(where.file)) or where.file
    return f"{shown}:{where.line}" if where.line is not None else shown


def explain_rules(
    graph: ModelGraph, rules: RuleSet, node: str | None = None, devices: int | None = None
) -> str:
    """The explanation as text: every node (or only `node`), then proposals for `devices`."""
    traces: list[tuple[CompiledOpportunity, str, Mapping[str, Any], Opportunity | None]] = []
    kept = {o.node_id: o.rule_id for o in analyze(graph, rules, lambda *t: traces.append(t))}
    graph_ids = [t[1] for t in traces if t[0].op is None]
    if node is not None and node not in {n.id for n in graph.nodes} | set(graph_ids):
        known = [n.id for n in graph.nodes] + graph_ids
        hint = difflib.get_close_matches(node, known, n=1)
        did_you_mean = f" (did you mean '{hint[0]}'?)" if hint else ""
        raise InputError(f"--node: no node {node!r} in graph {graph.name!r}{did_you_mean}")
    s = graph.stats
    out = [f"graph {graph.name}: {s.node_count} nodes, {s.edge_count} edges, depth {s.depth}"]
    for n in graph.nodes:
        if node in (None, n.id):
            mine = [t for t in traces if t[1] == n.id and t[0].op is not None]
            out += ["", f"node {n.id} (op {n.op}): {_verdict(kept.get(n.id), mine)}"]
            out += [line for t in mine for line in _opportunity(rules, *t, kept)]
    for node_id in dict.fromkeys(graph_ids):
        if node in (None, node_id):
            mine = [t for t in traces if t[1] == node_id and t[0].op is None]
            out += ["", f"graph-level {node_id}: {_verdict(kept.get(node_id), mine)}"]
            out += [line for t in mine for line in _opportunity(rules, *t, kept)]
    if devices is not None:
        out += ["", f"proposals for {devices} devices"]
        out += _proposals(graph, rules, devices)
    # one line each, whatever a node id, an op or a description holds (a line break included)
    return "".join(printable(line, limit=len(line)) + "\n" for line in out)


def _verdict(best: str | None, traces: list[Any]) -> str:
    if not traces:
        return "no rule for this op, and no '*' rule"
    return f"best {best}" if best else "no opportunity (no rule fired)"


def _opportunity(
    rules: RuleSet,
    rule: CompiledOpportunity,
    node_id: str,
    env: Mapping[str, Any],
    found: Opportunity | None,
    kept: Mapping[str, str],
) -> list[str]:
    status = "not fired"
    if found is not None:
        status = "fired, best" if kept.get(node_id) == rule.rule.id else "fired"
    lines = [_head(status, rule.rule.id, rule.rule.type, rule.origin)]
    lines.append(_line("when", found is not None, rule.rule.when, rule.when, env))
    if found is None:
        return lines + _parts(rules, rule.rule.when, rule.when, rule.rule.scope, env)
    values = {
        **found.resource_requirements.as_dict(),
        "speedup": found.estimated_speedup,
    }
    for name in _FIELDS:
        lines.append(_line(name, values[name], getattr(rule.rule, name), getattr(rule, name), env))
    return lines


def _proposals(graph: ModelGraph, rules: RuleSet, devices: int) -> list[str]:
    traces: list[tuple[CompiledProposal, Mapping[str, Any], Proposal | None]] = []
    propose(graph, rules, devices, lambda *t: traces.append(t))
    out: list[str] = []
    group = None
    for rule, env, made in traces:
        if rule.rule.group != group:
            group = rule.rule.group
            out.append(f"  group {group}")
        status = "fired" if made is not None else "not fired"
        out.append("  " + _head(status, rule.rule.id, rule.rule.type, rule.origin))
        out.append("  " + _line("when", made is not None, rule.rule.when, rule.when, env))
        if made is None:
            out += ["  " + p for p in _parts(rules, rule.rule.when, rule.when, "proposal", env)]
            continue
        out.append(
            "  " + _line("speedup", made.estimated_speedup, rule.rule.speedup, rule.speedup, env)
        )
        for key, formula in rule.settings.items():
            raw = rule.rule.settings[key]
            out.append("  " + _line(f"settings.{key}", made.settings[key], raw, formula, env))
        out.append(f"      description: {made.description}")
    return out


def _head(status: str, rule_id: str, kind: str, origin: RuleOrigin) -> str:
    return f"  {status}: {rule_id} ({kind})  {display_where(origin.where)}"


def _line(label: str, value: Any, raw: Any, formula: Formula, env: Mapping[str, Any]) -> str:
    """`    label: value  (source; name = value, ...)`; the source only where it is a formula."""
    shown = _show(value)
    notes = [raw.strip()] if isinstance(raw, str) and raw.strip() != shown else []
    values = [f"{n} = {_show(env.get(n, _MISSING))}" for n in sorted(formula.names)]
    notes += [", ".join(values)] if values else []
    return f"    {label}: {shown}" + (f"  ({'; '.join(notes)})" if notes else "")


def _parts(
    rules: RuleSet, raw: Any, when: Formula, context: str, env: Mapping[str, Any]
) -> list[str]:
    """Each part of a failed top-level `and`/`or`, evaluated as the engine would (`and` stops
    at the first false part)."""
    text = raw.strip() if isinstance(raw, str) else ""
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        return []
    if not isinstance(tree, ast.BoolOp):
        return []
    lines = []
    for operand in tree.values:
        source = ast.get_source_segment(text, operand) or ast.unparse(operand)
        try:
            part = rules.library.compile(source, when.where, context, "bool")
            value = part.evaluate(env)
        except FormulaError as exc:
            lines.append(f"      {source}: cannot be evaluated alone ({exc.message})")
            continue
        lines.append(_line(source, value, None, part, env).replace("    ", "      ", 1))
        if isinstance(tree.op, ast.And) and not value:
            break
    return lines


def _show(value: Any) -> str:
    if value is _MISSING:
        return "(no value)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = format(value, ".10g")
        return text + ".0" if text.lstrip("-").isdigit() else text
    return repr(value)
