"""Formulas: rule-file expressions, checked once at load, compiled when first evaluated (most
rules go unused by a command), evaluated many times.

A formula is data, never code. It is parsed with Python's parser (expression mode), every node
is checked against an allow-list, and the checked tree is compiled once into a small function
that runs with no builtins. Anything outside this language is a load error at the rule's
`file:line`:

- Values: numbers (`2`, `0.5`, `1e9`), strings (`'zero'`, `"x"`, at most 256 characters),
  `true`/`false` (also `True`/`False`), the size constants `KiB` ... `TiB` (`units`).
- Names: the dotted names of `parplan_gen.rules.vocabulary` (`graph.depth`, `graph.op_count.MatMul`,
  `node.attr.flops`, ...), limited by where the formula appears (a node rule may read `graph.*`
  and `node.*`, ...), and the named formulas of the `formulas:` maps, used by reference.
- Operators: `+ - * / // % **`, unary `-`/`+`, comparisons `< <= > >= == !=` (chains such as
  `1 < x <= 4` are fine), `not`, `and`, `or`, and `x if c else y`.
- Calls: only the functions of `parplan_gen.rules.vocabulary` (`min`, `max`, `clamp`, `ceil`, `log2`,
  ...), with positional arguments; the argument count is checked at load.
- Refused: names starting with `_`, attribute access except on vocabulary names, subscripts,
  lambda, comprehensions, f-strings, `:=`, `*args`/keyword arguments, bitwise operators and
  shifts, `is`/`in`, lists/tuples/dicts, bytes, `None`; a formula (named or not) longer than
  4000 characters, with more than 500 syntax nodes or nested deeper than 64 (a chain
  `a + b + ...` nests one level per term).
- Types are checked at load: arithmetic and `< <= > >=` need numbers (so there is no string
  repetition or concatenation), `not`/`and`/`or`/conditions need bools (`when` too), `==`/`!=`
  need two values of one type, both branches of `x if c else y` need one type. `true` is not a
  number. `settings.*` may hold any type, so it is checked when the formula runs.
- Semantics are Python's: `7 // 2` is 3, `7 / 2` is 3.5, `min(8, 3)` is the int 3, `**` is
  right-associative. Every number stays within ±1e300 (MAX_MAGNITUDE), so it is never inf or
  NaN and always converts to a float and prints: a literal beyond it is a load error, and so is
  the result of `*`, `/`, `//`, `**` and `exp()` (checked as they run; `**` of integers before
  it computes, so `9 ** 9 ** 9` fails at once) and the formula's result; a sum is checked where
  it ends up. `round(x, digits)` refuses digits beyond ±100.
  Division by zero, math domain errors, overflow, a number out of range and a name without a
  value (e.g. `node.attr.x` on a node without `x`) are errors naming the formula (and the part
  at fault). A part of a formula that reads no name (`10 ** 300 * 2`, even in a branch not
  taken) is computed at load, so such errors show up at load (a constant, or one arithmetic
  step on numbers that stays in range, without compiling anything: `formula_tree.folded`).

Named formulas (`formulas: {dp_speedup: "2.0 * clamp(graph.node_count / 10, 1, 2)"}`) are
plain identifiers usable by name in any formula. Each is checked and compiled once per library
(rule set) into a function of its own, and a use is a reference to its value: computed the first
time an evaluation needs it, kept in the evaluation's memo (`Formula.evaluate`) and reused, so
one evaluation runs each named formula at most once however often it is used. Recursion between
them is an error showing the cycle; so is a formula whose graph (itself and every named formula
it reaches, each counted once) has more than 10000 syntax nodes (MAX_GRAPH_NODES), or a chain of
uses more than 64 named formulas deep (MAX_NAMED_DEPTH: each link is a Python call as it runs),
and more than 5000 named formulas in a library (MAX_NAMED_FORMULAS).
A named formula's value is checked against ±MAX_MAGNITUDE as a result is. A named formula that
reads no name is computed at load, where its errors point, and used as a literal.

Text templates (proposal descriptions) hold `{formula}` or `{formula:spec}` placeholders; the
spec is a restricted format spec (`[+-]`, width up to 2 digits, `.` and up to 2 digits of
precision, one of `d f g e E %`), e.g. `"{settings.dp} devices ({speedup:.1f}x)"`; `{{`/`}}`
are literal braces. A placeholder cannot contain braces, and the text after its last `:` is the
spec. Values are formatted with Python's `format` (a bool shows as `True`/`False`). A text is at
most MAX_TEXT_CHARS characters with at most MAX_PLACEHOLDERS placeholders (a load error), and
what it renders is cut at MAX_RENDERED_CHARS, saying how much was left out.
"""

from __future__ import annotations

import ast
import keyword
import re
from collections.abc import Mapping
from typing import Any

from parplan_gen.inputs.errors import FormulaError, SourceRef
from parplan_gen.rules import vocabulary
from parplan_gen.rules.formula_runtime import (
    GLOBALS,
    KIND_TEXT,
    Expect,
    Formula,
    Value,
    shorten,
    show_value,
)
from parplan_gen.rules.formula_translate import (
    MAX_GRAPH_NODES,
    MAX_NAMED_DEPTH,
    MAX_NAMED_FORMULAS,
    MAX_NODES,
    Named,
    Translator,
)
from parplan_gen.rules.formula_tree import build, named_function
from parplan_gen.rules.units import SIZE_CONSTANTS

_SPEC = re.compile(r"[+-]?\d{0,2}(\.\d{1,2})?[dfgeE%]?", re.ASCII)
# A rule's reason or a proposal's description is one line shown in an error (whose message is
# cut at errors.SHOWN_MESSAGE_CHARS = 2000), in plan.md and in the text view; the longest
# built-in one has 185 characters and 3 placeholders. Each placeholder is a formula compiled at
# load and run for every rejection, and one placeholder renders up to 256 characters (a string
# value), so a text is bounded where it is read and again where it is rendered: a few hundred KB
# of `{name}` would otherwise render to megabytes per rejected candidate.
MAX_TEXT_CHARS = 2000
MAX_PLACEHOLDERS = 50
MAX_RENDERED_CHARS = 2000
# The compiled formulas a library keeps to hand back when the same rule value is compiled again
# (every load of an overlay compiles the built-in rules' formulas anew): the built-in rules
# compile ~1,000; a hostile overlay's millionth formula is compiled, not kept.
MAX_REMEMBERED_FORMULAS = 4096


class TextTemplate:
    """Text with `{formula}` / `{formula:spec}` placeholders; `{{` and `}}` are braces."""

    def __init__(
        self, source: str, where: SourceRef, parts: list[str | tuple[Formula, str]]
    ) -> None:
        self.source, self.where, self._parts = source, where, tuple(parts)
        self.names = frozenset().union(*(p[0].names for p in parts if isinstance(p, tuple)))

    @property
    def formulas(self) -> tuple[Formula, ...]:
        """The formulas of its placeholders, in order."""
        return tuple(part[0] for part in self._parts if isinstance(part, tuple))

    def render(self, env: Mapping[str, object]) -> str:
        """The text with each placeholder's value formatted in place."""
        out = []
        for part in self._parts:
            if isinstance(part, str):
                out.append(part)
                continue
            formula, spec = part
            value = formula.evaluate(env)
            try:
                out.append(format(value, spec))
            except (ValueError, TypeError) as exc:
                raise FormulaError(
                    f"placeholder {{{shorten(formula.source)}:{spec}}} cannot format "
                    f"{shorten(show_value(value))}: {exc}",
                    self.where,
                ) from None
        return cut_text("".join(out))


def cut_text(text: str, limit: int = MAX_RENDERED_CHARS) -> str:
    """`text`, or its first `limit` characters and how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def _split_template(text: str, where: SourceRef) -> list[str | tuple[str, str]]:
    """Literal text and (formula, spec) pairs, with `{{`/`}}` unescaped."""
    if len(text) > MAX_TEXT_CHARS:
        raise FormulaError(
            f"text {shorten(text)!r} has {len(text):,} characters; at most {MAX_TEXT_CHARS:,} "
            "(a reason or description is one line of a message)",
            where,
        )
    parts: list[str | tuple[str, str]] = []
    pieces = re.split(r"(\{\{|\}\}|\{[^{}]*\}|[{}])", text)
    placeholders = sum(1 for piece in pieces[1::2] if piece not in ("{{", "}}", "{", "}"))
    if placeholders > MAX_PLACEHOLDERS:
        raise FormulaError(
            f"text {shorten(text)!r} has {placeholders:,} placeholders; at most "
            f"{MAX_PLACEHOLDERS} (each is a formula run for every rejection)",
            where,
        )
    for i, piece in enumerate(pieces):
        if i % 2 == 0 or piece in ("{{", "}}"):
            parts.append(piece[0] if i % 2 else piece)
        elif piece in ("{", "}"):
            column = len("".join(pieces[:i])) + 1
            raise FormulaError(
                f"text {shorten(text)!r}: unmatched {piece!r} at column {column} "
                f"(write {piece * 2!r} for a literal brace)",
                where,
            )
        else:
            expr, colon, spec = piece[1:-1].rpartition(":")
            expr, spec = (expr, spec) if colon else (spec, "")
            if not _SPEC.fullmatch(spec):
                raise FormulaError(
                    f"text {shorten(text)!r}: format spec {spec!r} is not allowed "
                    "(e.g. 'd', '.1f', '+.2%')",
                    where,
                )
            parts.append((expr, spec))
    return parts


class FormulaLibrary:
    """The named formulas of all rule files, and the compiler of every other formula."""

    def __init__(self, named: Mapping[str, tuple[Value, SourceRef]]) -> None:
        for name, (value, where) in named.items():
            _check_formula_name(name, value, where)
        if len(named) > MAX_NAMED_FORMULAS:
            where = list(named.values())[MAX_NAMED_FORMULAS][1]
            raise FormulaError(f"more than {MAX_NAMED_FORMULAS} named formulas", where)
        parsed = {name: _parse(value, where) for name, (value, where) in named.items()}
        refs = {name: _references(tree, named) for name, (tree, _) in parsed.items()}
        self._named: dict[str, Named] = {}
        # The globals of this library's formulas: GLOBALS and `_n_<name>`, the function of each
        # named formula that reads names (formula_tree.named_function).
        self._globals: dict[str, object] = dict(GLOBALS)
        self._graphs = _Graphs()
        for name in _dependency_order(refs, {n: w for n, (_, w) in named.items()}):
            value, where = named[name]
            translator = Translator(str(value), where, None, self._named)
            tree, kind = translator.translate(value, parsed[name])
            names = frozenset(translator.names)
            if not names:  # computed at load (its failure is reported here), used as a value
                constant = build(str(value), where, tree, kind, names, self._globals)
                known: Any = constant.evaluate({})  # a Value: the formula's kind was checked
                refers = tuple(translator.refers)
                self._named[name] = Named(kind, names, known, refers=refers)
                continue
            reach, depth = self._graphs.measure(translator, name)
            uses, refers = tuple(translator.uses), tuple(translator.refers)
            self._named[name] = Named(kind, names, None, reach, depth, uses, refers)
            self._globals[f"_n_{name}"] = named_function(name, tree, kind, self._globals)
        self._order = tuple(named)
        # Each formula compiled, by its value, place (file, key path, parse) and the compile's
        # arguments, with the SourceRef it was compiled at (SourceRef.same_place).
        self._compiled: dict[tuple[object, ...], tuple[Formula, SourceRef]] = {}

    @property
    def names(self) -> tuple[str, ...]:
        """The named formulas, in the order given."""
        return self._order

    def refers(self, name: str) -> tuple[str, ...]:
        """The named formulas that the named formula `name` uses directly, in order of first use
        (those computed at load included)."""
        return self._named[name].refers

    def compile(
        self,
        value: Value,
        where: SourceRef,
        context: str,
        expect: Expect | None = None,
        models: tuple[str, ...] | None = None,
    ) -> Formula:
        """Check and compile one rule value for `context` (a key of vocabulary.CONTEXTS);
        with `models`, every model.* name it reads must have a value for each of those kinds."""
        if context not in vocabulary.CONTEXTS:
            raise ValueError(f"unknown formula context {context!r}")
        if not isinstance(value, str | int | float):  # refused by the translation
            return self._compile(value, where, context, expect, models)
        place = (where.file, where.path, id(where.document))
        key = (type(value).__name__, value, *place, context, expect, models)
        kept = self._compiled.get(key)
        if kept is not None and kept[1].same_place(where):
            return kept[0]
        formula = self._compile(value, where, context, expect, models)
        if len(self._compiled) < MAX_REMEMBERED_FORMULAS:
            self._compiled[key] = (formula, where)
        return formula

    def _compile(
        self,
        value: Value,
        where: SourceRef,
        context: str,
        expect: Expect | None,
        models: tuple[str, ...] | None,
    ) -> Formula:
        source = value if isinstance(value, str) else repr(value)
        translator = Translator(source, where, context, self._named, models)
        tree, kind = translator.translate(value)
        self._graphs.measure(translator)
        if expect is not None and kind != expect:
            if kind != "any":
                raise translator.fail(
                    f"gives {KIND_TEXT[kind]}, but {KIND_TEXT[expect]} is needed here"
                )
            tree, kind = translator.coerce(tree, kind, expect, "", source), expect
        names, refers = frozenset(translator.names), tuple(translator.refers)
        return build(source, where, tree, kind, names, self._globals, refers)

    def compile_text(
        self, text: str, where: SourceRef, context: str, models: tuple[str, ...] | None = None
    ) -> TextTemplate:
        """Compile a description with `{formula}` / `{formula:spec}` placeholders."""
        parts: list[str | tuple[Formula, str]] = []
        for part in _split_template(text, where):
            if isinstance(part, str):
                parts.append(part)
            else:
                parts.append((self.compile(part[0], where, context, None, models), part[1]))
        return TextTemplate(text, where, parts)


class _Graphs:
    """Measures the graph of each formula of a library: the named formulas an evaluation of it
    may compute (a bit mask: bit i for the i-th named formula that reads names, so a union is
    one `|` and the masks of a rule set take at most MAX_NAMED_FORMULAS**2 bits) and the syntax
    nodes they hold, each counted once, checked against MAX_GRAPH_NODES; and its longest chain
    of uses, checked against MAX_NAMED_DEPTH."""

    def __init__(self) -> None:
        self.count = 0
        # Bit j of a formula's size is set in weights[j] at the formula's bit: the nodes of a
        # mask are sum(popcount(mask & weights[j]) << j), exact for any sharing.
        self.weights = [0] * MAX_NODES.bit_length()

    def nodes(self, mask: int) -> int:
        return sum((mask & weight).bit_count() << j for j, weight in enumerate(self.weights))

    def measure(self, translator: Translator, own: str | None = None) -> tuple[int, int]:
        """(reach, depth) of a translated formula; with `own`, the name of the named formula it
        defines, which both count."""
        named = translator.named
        uses = [named[name] for name in translator.uses]
        reach = 0
        for used in uses:
            reach |= used.reach
        nodes = translator.size + self.nodes(reach)
        if nodes > MAX_GRAPH_NODES:
            raise translator.fail(
                f"too large with the named formulas it uses ({nodes} syntax nodes, "
                f"at most {MAX_GRAPH_NODES})"
            )
        depth = max((used.depth for used in uses), default=0) + (own is not None)
        if depth > MAX_NAMED_DEPTH:
            chain = [*([own] if own else []), *_deepest_chain(named, list(translator.uses))]
            shown = chain if len(chain) <= 6 else [*chain[:3], "...", *chain[-2:]]
            raise translator.fail(
                f"named formulas nested deeper than {MAX_NAMED_DEPTH} "
                f"({' -> '.join(shown)}: {depth} levels)"
            )
        if own is not None:
            bit, self.count = 1 << self.count, self.count + 1
            for j in range(len(self.weights)):
                if translator.size >> j & 1:
                    self.weights[j] |= bit
            reach |= bit
        return reach, depth


def _deepest_chain(named: Mapping[str, Named], uses: list[str]) -> list[str]:
    """The named formulas of the longest chain of uses from `uses`, in order."""
    chain: list[str] = []
    while uses:
        chain.append(max(uses, key=lambda name: named[name].depth))
        uses = list(named[chain[-1]].uses)
    return chain


def _check_formula_name(name: str, value: Value, where: SourceRef) -> None:
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        raise FormulaError(
            f"named formula {name!r}: a name must be a plain identifier "
            "(letters, digits and '_', no dots, not starting with '_')",
            where,
        )
    constant = vocabulary.CONSTANTS.get(name)
    if name in SIZE_CONSTANTS and not isinstance(value, bool) and value == constant:
        return  # the constant's own value, as rule files wrote it before it was a constant
    if name in SIZE_CONSTANTS:
        raise FormulaError(
            f"named formula {name!r} clashes with the constant {name} ({constant}); a formula "
            f"may use {name} without defining it",
            where,
        )
    if name in _CLASHES:
        raise FormulaError(
            f"named formula {name!r} clashes with {_CLASHES[name]} of the same name", where
        )


_CLASHES = {entry.namespace: "a vocabulary namespace" for entry in vocabulary.NAMES}
_CLASHES |= {constant: "a constant" for constant in vocabulary.CONSTANTS}
_CLASHES |= {function: "a function" for function in vocabulary.FUNCTION_BY_NAME}


def _parse(value: Value, where: SourceRef) -> tuple[ast.expr | None, int]:
    """The syntax tree of a formula's text and its size (checks its syntax), parsed once for
    both `_references` and the translation; (None, 0) for a number or bool."""
    if not isinstance(value, str):
        return None, 0
    translator = Translator(value, where, None, {})
    return translator.parse(), translator.size


def _references(tree: ast.expr | None, named: Mapping[str, object]) -> list[str]:
    """The named formulas a parsed formula mentions, in order of first mention."""
    if tree is None:
        return []
    found = [n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in named]
    return list(dict.fromkeys(found))


def _dependency_order(refs: Mapping[str, list[str]], where: Mapping[str, SourceRef]) -> list[str]:
    """Named formulas with each after those it uses; recursion is an error showing the cycle."""
    order: list[str] = []
    state: dict[str, str] = {}
    for root in refs:
        if root in state:
            continue
        path, pending = [root], [iter(refs[root])]
        state[root] = "open"
        while pending:
            nxt = next(pending[-1], None)
            if nxt is None:
                pending.pop()
                order.append(path.pop())
                state[order[-1]] = "done"
            elif state.get(nxt) == "open":
                cycle = [*path[path.index(nxt) :], nxt]
                raise FormulaError(
                    "recursion between named formulas: " + " -> ".join(cycle), where[cycle[0]]
                )
            elif nxt not in state:
                state[nxt] = "open"
                path.append(nxt)
                pending.append(iter(refs[nxt]))
    return order
