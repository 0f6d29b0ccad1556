"""Why a figure or a named formula has its value: the tree of the formulas that give it.

Given the environment of one evaluation (the `model.*`, `cluster.*`, `train.*`, `plan.*` values
of one layout, and the memo of the named formulas it computed) and a name (an estimate figure,
`time.step_s`, or a named formula, `dp_comm_s`), `explain_name` returns its `FormulaNode`: the
formula, its value, unit, source and `file:line`, and a child for every name the formula reads,
in the order it reads them, down to the inputs. A named formula the tree has shown already is
shown again by name and value only; `max_depth` and `max_nodes` bound the rest. `render` writes
the tree as indented text, one line per node.
"""

from __future__ import annotations

import ast
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from parplan_gen.inputs.errors import MAX_HINT_CHARS, FormulaError, InputError, SourceRef
from parplan_gen.rules import vocabulary
from parplan_gen.rules.explain import display_where
from parplan_gen.rules.formula_runtime import shorten
from parplan_gen.rules.ruleset import EstimateFormula, RuleSet
from parplan_gen.rules.units import figure_unit

# A tree is read by a person: the built-in step time reaches ~200 named formulas and inputs,
# each shown once in full. Past this many lines the rest is counted, not shown.
MAX_EXPLAIN_NODES = 1000
SECTIONS = ("memory", "time", "throughput")
# Every name a named formula may read, whatever rule uses it (the widest context).
_CONTEXT = "budget"
NodeKind = Literal["figure", "named", "input"]


@dataclass(frozen=True)
class FormulaNode:
    """One name of the tree: a figure, a named formula or an input, its value (None where it
    has none here: `note` says why) and the names its formula reads (`children`)."""

    name: str
    kind: NodeKind
    value: object
    unit: str | None = None
    formula: str | None = None  # the formula's text; None for an input
    source: str | None = None
    where: str | None = None  # `file:line` of the formula
    children: tuple[FormulaNode, ...] = ()
    note: str | None = None  # shown above, not computed here, or what the bounds left out

    def render(self, indent: str = "  ") -> str:
        """The tree as text: `name = value unit  [formula; file:line; source]`, children
        indented below their parent."""
        return "\n".join(_lines(self, 0, indent)) + "\n"

    def contract(self) -> dict[str, Any]:
        """The tree as JSON-ready data (children nested)."""
        return {
            "name": self.name,
            "kind": self.kind,
            "value": self.value,
            "unit": self.unit,
            "formula": self.formula,
            "source": self.source,
            "where": self.where,
            "note": self.note,
            "children": [child.contract() for child in self.children],
        }


def explain_name(
    rules: RuleSet,
    env: Mapping[str, object],
    name: str,
    *,
    model_kind: str = "transformer",
    memo: dict[str, object] | None = None,
    max_depth: int | None = None,
    max_nodes: int = MAX_EXPLAIN_NODES,
) -> FormulaNode:
    """The tree of `name` in the evaluation `env` (`memo`: the named formulas' values computed
    for it so far, reused and added to): an estimate figure of `model_kind`'s cost model
    (`time.step_s`, also written `estimate.time.step_s`), a named formula or an input name.
    `max_depth`: levels below the root shown (None: down to the inputs); `max_nodes`: lines."""
    walk = _Walk(rules, env, {} if memo is None else memo, max_depth, max_nodes)
    figures = {f"{e.section}.{e.key}": e for e in rules.estimate if e.model_kind == model_kind}
    figure = figures.get(name.removeprefix("estimate."))
    if figure is not None:
        return walk.figure(figure)
    if name in rules.library.names:
        return walk.named(name, 0)
    if vocabulary.lookup(name) is not None:
        return walk.input(name)
    known = [*figures, *rules.library.names]
    close = difflib.get_close_matches(name, known, n=1) if len(name) <= MAX_HINT_CHARS else []
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise InputError(
        f"nothing to explain named '{shorten(name)}'{hint}: name a figure of the estimate "
        "(time.step_s, memory.params, ...), a named formula of the rules or an input (plan.tp)"
    )


@dataclass
class _Walk:
    rules: RuleSet
    env: Mapping[str, object]
    memo: dict[str, object]
    max_depth: int | None
    max_nodes: int
    shown: set[str] = field(default_factory=set)
    count: int = 0

    def figure(self, figure: EstimateFormula) -> FormulaNode:
        self.count += 1
        formula = figure.formula
        value, note = self._value(lambda: formula.evaluate(self.env, self.memo))
        children, left_out = self._children(formula.source, 1)
        return FormulaNode(
            f"{figure.section}.{figure.key}",
            "figure",
            value,
            figure_unit(figure.section, figure.key),
            _text(formula.source),
            None,
            display_where(figure.origin.where),
            children,
            note or left_out,
        )

    def named(self, name: str, depth: int) -> FormulaNode:
        self.count += 1
        note, origin = self.rules.formula_notes[name]
        where = SourceRef(f"named formula {name}")
        library, memo = self.rules.library, self.memo
        value, failed = self._value(
            lambda: (
                memo[name]
                if name in memo
                else library.compile(name, where, _CONTEXT).evaluate(self.env, memo)
            )
        )
        text = note.value if isinstance(note.value, str) else _shown(note.value)
        node = FormulaNode(
            name, "named", value, note.unit, _text(text), note.source, display_where(origin.where)
        )
        if name in self.shown:
            return replace(node, note="shown above")
        self.shown.add(name)
        children, left_out = self._children(text, depth + 1)
        return replace(node, children=children, note=failed or left_out)

    def input(self, name: str) -> FormulaNode:
        self.count += 1
        entry = vocabulary.lookup(name)
        unit = None if entry is None or entry.unit == "-" else entry.unit
        if name in self.env:
            return FormulaNode(name, "input", self.env[name], unit)
        return FormulaNode(name, "input", None, unit, note="no value here")

    def _children(self, text: str, depth: int) -> tuple[tuple[FormulaNode, ...], str | None]:
        """The nodes of the names `text` reads here, and what they leave out: the names of the
        branches not taken, and what the bounds do not show."""
        names, skipped = self._reads(text)
        notes = [f"not taken here: {', '.join(skipped)}"] if skipped else []
        if self.max_depth is not None and depth > self.max_depth and names:
            notes.append(f"{_count(len(names))} below not shown: depth limit {self.max_depth}")
            return (), "; ".join(notes)
        children: list[FormulaNode] = []
        for i, name in enumerate(names):
            if self.count >= self.max_nodes:
                left = _count(len(names) - i)
                notes.append(f"{left} more not shown: {self.max_nodes} lines at most")
                break
            named = name in self.rules.formula_notes
            children.append(self.named(name, depth) if named else self.input(name))
        return tuple(children), "; ".join(notes) or None

    def _reads(self, text: str) -> tuple[list[str], list[str]]:
        """The named formulas and input names `text` reads here, in the order it reads them,
        and those it does not: only in a branch of `x if c else y` not taken, or in a part of
        `and` / `or` after the one that decides."""
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError):
            return [], []
        found: list[tuple[int, int, str]] = []
        skipped: list[tuple[int, int, str]] = []
        self._visit(tree.body, found, skipped)
        read = list(dict.fromkeys(name for *_, name in sorted(found)))
        return read, [n for n in dict.fromkeys(n for *_, n in sorted(skipped)) if n not in read]

    def _visit(self, node: ast.AST, found: list[Any], skipped: list[Any]) -> None:
        if isinstance(node, ast.IfExp):
            self._visit(node.test, found, skipped)
            taken = self._truth(node.test)
            for branch, runs in ((node.body, taken is not False), (node.orelse, taken is not True)):
                self._visit(branch, found if runs else skipped, skipped)
            return
        if isinstance(node, ast.BoolOp):
            decided = False
            for value in node.values:
                self._visit(value, skipped if decided else found, skipped)
                truth = None if decided else self._truth(value)
                decided = decided or truth is isinstance(node.op, ast.Or)
            return
        dotted = _dotted(node)
        if dotted is None:
            for child in ast.iter_child_nodes(node):
                self._visit(child, found, skipped)
        elif dotted not in vocabulary.CONSTANTS and (
            dotted in self.rules.formula_notes or vocabulary.lookup(dotted) is not None
        ):
            found.append((node.lineno, node.col_offset, dotted))  # type: ignore[attr-defined]

    def _truth(self, test: ast.expr) -> bool | None:
        """The value of a condition of the formula here (None: it cannot be computed)."""
        where = SourceRef("explained formula")
        try:
            formula = self.rules.library.compile(ast.unparse(test), where, _CONTEXT, "bool")
            value = formula.evaluate(self.env, self.memo)
        except FormulaError:
            return None
        return value if isinstance(value, bool) else None

    def _value(self, compute: Any) -> tuple[object, str | None]:
        try:
            return compute(), None
        except FormulaError as exc:
            return None, f"not computed here: {exc.message}"


def _dotted(node: ast.AST) -> str | None:
    """`graph.op_count.MatMul` for an attribute chain on a name, the name for a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _count(n: int) -> str:
    return f"{n} name{'' if n == 1 else 's'}"


def _text(text: str) -> str:
    return " ".join(text.split())


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, ".4g")
    return repr(value) if isinstance(value, str) else str(value)


def _lines(node: FormulaNode, level: int, indent: str) -> list[str]:
    value = "?" if node.value is None else _shown(node.value)
    shown_unit = node.unit not in (None, "1")  # a dimensionless ratio has none to show
    head = f"{node.name} = {value}" + (f" {node.unit}" if shown_unit else "")
    if node.kind == "input":
        about = ["input"]
    else:
        formula = node.formula if node.formula is not None else ""
        about = [shorten(formula)] if node.note != "shown above" else []
        about += [part for part in (node.where, node.source) if part]
    line = f"{indent * level}{head}" + (f"  [{'; '.join(about)}]" if about else "")
    line += f"  ({node.note})" if node.note else ""
    out = [line]
    for child in node.children:
        out += _lines(child, level + 1, indent)
    return out
