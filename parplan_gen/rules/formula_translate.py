"""The formula language's checker: parses one formula, checks every node against the
allow-list, the limits (MAX_TEXT, MAX_NODES, ...), the vocabulary names its context may read
and the types, and rewrites it into an evaluable tree (named formulas referenced, growing
operations bounded, parts that read no name computed at load). See `formulas` for the language.
"""

from __future__ import annotations

import ast
import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

from parplan_gen.inputs.errors import FormulaError, SourceRef
from parplan_gen.rules import vocabulary
from parplan_gen.rules.formula_runtime import (
    KIND_TEXT,
    MAX_MAGNITUDE,
    Kind,
    Value,
    shorten,
    show_value,
)
from parplan_gen.rules.formula_tree import Bounded, bounded, build, locate, measure, reference

# Each formula, named or not, on its own:
MAX_TEXT = 4000
MAX_STRING = 256
MAX_NODES = 500
MAX_DEPTH = 64
# Each formula with the named formulas it uses (its graph): a named formula is computed once per
# evaluation however often it is used (`formula_tree.reference`), so what one evaluation runs
# is at most the syntax nodes of the formula and of each named formula it reaches, counted once.
# The largest graph of the built-in rules (hardware_tflops_per_gpu, rules/cost/throughput.yaml,
# which reaches the whole step's cost model) is ~5000 nodes; the cap is twice that, so that the
# cost model can grow a term without trading another away, and one evaluation stays linear in it.
MAX_GRAPH_NODES = 10000
# Named formulas in a chain of uses (`a` uses `b` uses `c`: 3): each link is one Python call
# while it runs, so this keeps far below Python's recursion limit. The built-in rules use 12.
MAX_NAMED_DEPTH = 64
# Named formulas of a rule set (the built-in rules define ~280): each keeps the set of those it
# reaches as a bit mask of this many bits (formulas.FormulaLibrary), so at most 3 MB in all.
MAX_NAMED_FORMULAS = 5000
ANY_NAMESPACES = frozenset({"settings"})  # declared "number", but settings may be any type
_CONTEXT_LABELS = {"proposal_description": "proposal descriptions"}  # else "<context> rules"

_FORBIDDEN = {ast.Lambda: "lambda is not allowed", ast.NamedExpr: "':=' is not allowed"}
_FORBIDDEN |= dict.fromkeys((ast.Subscript, ast.Slice), "subscripts ([...]) are not allowed")
_FORBIDDEN |= dict.fromkeys(
    (ast.List, ast.Tuple, ast.Set, ast.Dict), "lists, tuples, sets, dicts are not allowed"
)
_FORBIDDEN |= dict.fromkeys((ast.JoinedStr, ast.FormattedValue), "f-strings are not allowed")
_FORBIDDEN |= dict.fromkeys(
    (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp), "comprehensions are not allowed"
)
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//"}
_BINOPS |= {ast.Mod: "%", ast.Pow: "**"}
# Operations whose result can be far larger than their operands: checked against MAX_MAGNITUDE
# as they run (`**` by `_pow`). The others stay within twice their largest operand.
_GROWING = frozenset({"*", "/", "//", "exp"})
# An operand here needs no check of its own: the result's check covers it. An inf or NaN there
# gives inf or NaN (inf * 0 is NaN), which the result's check refuses; a huge integer gives an
# exact result, refused if it is out of range. Once only, so that what goes unchecked stays
# small (at most two checked values multiplied). Not a divisor: x / inf is 0.0. This drops
# about a third of the checks of the built-in cost model.
_COVERS = {"*": ("left", "right"), "/": ("left",), "//": ("left",)}

_ORDERING = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_EQUALITY = {ast.Eq: "==", ast.NotEq: "!="}


@dataclass(frozen=True)
class Named:
    """A named formula, checked in no particular context. `value`: its value when it reads no
    name (computed at load and used as a literal), else None, and it is computed by reference:
    `reach` the named formulas its evaluation may compute (itself
    included; a bit mask, one bit per named formula of the library), `depth` the longest chain
    of uses from it (itself included), `uses` the named formulas it uses directly, `refers`
    those and the ones computed at load, in order of first use."""

    kind: Kind
    names: frozenset[str]
    value: Value | None = None
    reach: int = 0
    depth: int = 0
    uses: tuple[str, ...] = ()
    refers: tuple[str, ...] = ()


def _namespace_text(namespace: str) -> str:
    return namespace if vocabulary.lookup(namespace) else namespace + ".*"


class Translator:
    """Checks one formula against the language and rewrites it into an evaluable tree.

    Vocabulary names become `_e["dotted.name"]`, `**` becomes `_pow(a, b)`, `f(...)` becomes
    `_fn_f(...)`, a named formula becomes a reference to its memoised value (or its value, when
    it reads no name), and "any" values where a number or bool is needed are wrapped in a
    runtime check. User names can't start with `_`, so none collide.
    """

    def __init__(
        self,
        text: str,
        where: SourceRef,
        context: str | None,
        named: Mapping[str, Named],
        models: tuple[str, ...] | None = None,
    ) -> None:
        self.text, self.where, self.named = text, where, named
        self.allowed = None if context is None else vocabulary.CONTEXTS[context]
        self.models = models  # the kinds of model the rule applies to (None: any name goes)
        self.context_label = _CONTEXT_LABELS.get(str(context), f"{context} rules")
        self.names: set[str] = set()
        self.reads = 0  # vocabulary names read so far, counting repeats (0: a constant part)
        self.lines: tuple[bytes, list[int]] | None = None  # for `quote`, made when first needed
        self.size = 0  # syntax nodes of the text
        self.uses: dict[str, None] = {}  # the named formulas referenced, in order of first use
        self.refers: dict[str, None] = {}  # the same, with those computed at load (constants)

    def fail(self, reason: str) -> FormulaError:
        return FormulaError(f"formula {shorten(self.text)!r}: {reason}", self.where)

    def parse(self) -> ast.expr:
        """The checked-for-size syntax tree of the text."""
        text = self.text.strip()
        if len(text) > MAX_TEXT:
            raise self.fail(f"too long ({len(text)} characters, at most {MAX_TEXT})")
        if not text:
            raise self.fail("empty formula")
        try:
            tree = ast.parse(text, mode="eval").body
        except SyntaxError as exc:
            column = exc.offset and exc.offset + len(self.text) - len(self.text.lstrip())
            raise self.fail(f"{exc.msg}{f' at column {column}' if column else ''}") from None
        except ValueError:
            raise self.fail("invalid characters") from None
        except (RecursionError, MemoryError):
            raise self.fail(f"nested deeper than {MAX_DEPTH}") from None
        count, depth = measure(tree, MAX_NODES)
        if count > MAX_NODES:
            raise self.fail(f"too complex (more than {MAX_NODES} syntax nodes)")
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH}")
        self.size = count
        return tree

    def translate(
        self, value: Value, parsed: tuple[ast.expr | None, int] = (None, 0)
    ) -> tuple[ast.expr, Kind]:
        """The evaluable tree and kind of a rule value (a number, a bool or formula text);
        `parsed`: its syntax tree and size when the text was parsed already."""
        if isinstance(value, bool | int | float):
            return self.constant(ast.Constant(value))
        if not isinstance(value, str):
            raise self.fail(f"a formula must be a number, true/false or text, not {value!r}")
        tree, self.size = parsed if parsed[0] is not None else (self.parse(), self.size)
        checked, kind = self.visit(tree)  # type: ignore[arg-type]
        return locate(checked), kind

    def visit(self, node: ast.AST) -> tuple[ast.expr, Kind]:
        """The evaluable tree and kind of `node`; a part that reads no name is computed now
        (bottom-up, so each step evaluates one operation), so that its errors are load errors."""
        handler = _HANDLERS.get(type(node))
        if handler is None:
            raise self.fail(_FORBIDDEN.get(type(node), f"{type(node).__name__} is not allowed"))
        reads = self.reads
        tree, kind = handler(self, node)
        if self.reads == reads and not isinstance(tree, ast.Constant):
            checked = bounded(tree, self.quote(node)) if kind == "number" else tree
            # A formula of literals evaluates to a literal's type (no name read: no "any").
            value = cast(
                Value, build(self.text, self.where, checked, kind, frozenset()).evaluate({})
            )
            tree = locate(ast.Constant(value))
        return tree, kind

    def quote(self, node: ast.AST) -> str:
        """`node`'s text in the formula, quoted (and shortened) for messages."""
        if self.lines is None:  # the parsed text as bytes: ast counts columns in UTF-8 bytes
            source = self.text.strip().encode()
            starts = [0, *(i + 1 for i, byte in enumerate(source) if byte == ord("\n"))]
            self.lines = (source, starts)
        source, starts = self.lines
        start = starts[node.lineno - 1] + node.col_offset  # type: ignore[attr-defined]
        end = starts[node.end_lineno - 1] + node.end_col_offset  # type: ignore[attr-defined]
        return repr(shorten(source[start:end].decode()))

    def coerce(
        self, tree: ast.expr, kind: Kind, want: Kind, what: str, node: ast.AST | str
    ) -> ast.expr:
        """`tree` where a `want` is needed: as is, checked at runtime ("any"), or an error."""
        if kind == want:
            return tree
        label = shorten(node if isinstance(node, str) else ast.unparse(node))
        if kind == "any":
            check = ast.Name(f"_check_{want}", ast.Load())
            return ast.Call(check, [tree, ast.Constant(label)], [])
        raise self.fail(f"{what} needs {KIND_TEXT[want]}, but {label!r} is {KIND_TEXT[kind]}")

    def need(self, node: ast.expr, want: Kind, what: str) -> ast.expr:
        return self.coerce(*self.visit(node), want, what, node)

    def constant(self, node: ast.Constant) -> tuple[ast.expr, Kind]:
        value = node.value
        if isinstance(value, bool):
            return locate(ast.Constant(value)), "bool"
        if isinstance(value, int | float):
            if isinstance(value, float) and not math.isfinite(value):
                raise self.fail(f"{value!r} is not a finite number")
            if not -MAX_MAGNITUDE <= value <= MAX_MAGNITUDE:
                raise self.fail(
                    f"{show_value(value)} is out of range (numbers are limited to ±{MAX_MAGNITUDE:g})"
                )
            return locate(ast.Constant(value)), "number"
        if isinstance(value, str):
            if len(value) > MAX_STRING:
                raise self.fail(f"string literals are limited to {MAX_STRING} characters")
            return ast.Constant(value), "str"
        kind = {bytes: "bytes literals", complex: "complex numbers"}.get(type(value))
        raise self.fail(f"{kind or repr(value)} {'are' if kind else 'is'} not allowed")

    def name(self, node: ast.Name) -> tuple[ast.expr, Kind]:
        ident = node.id
        if ident.startswith("_"):
            raise self.fail(f"names starting with '_' are not allowed: {ident!r}")
        if ident in vocabulary.CONSTANTS:
            value = vocabulary.CONSTANTS[ident]
            return ast.Constant(value), "bool" if isinstance(value, bool) else "number"
        if ident in self.named:
            return self.refer(ident)
        if ident in vocabulary.FUNCTION_BY_NAME:
            signature = vocabulary.FUNCTION_BY_NAME[ident].signature
            raise self.fail(f"function {ident!r} must be called: {signature}")
        return self.vocabulary_name(ident)

    def attribute(self, node: ast.Attribute) -> tuple[ast.expr, Kind]:
        return self.vocabulary_name(self.dotted(node))

    def dotted(self, node: ast.expr) -> str:
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            raise self.fail("attribute access is only allowed on vocabulary names (graph.depth)")
        dotted = ".".join([node.id, *reversed(parts)])
        if any(part.startswith("_") for part in dotted.split(".")):
            raise self.fail(f"names starting with '_' are not allowed: {dotted!r}")
        return dotted

    def vocabulary_name(self, dotted: str) -> tuple[ast.expr, Kind]:
        entry = vocabulary.lookup(dotted)
        if entry is None:
            raise self.fail(f"unknown name {dotted!r}{_did_you_mean(dotted, self.named)}")
        self.check_available(dotted, "")
        self.names.add(dotted)
        self.reads += 1
        kind: Kind = "any" if entry.namespace in ANY_NAMESPACES else entry.kind
        return ast.Subscript(ast.Name("_e", ast.Load()), ast.Constant(dotted), ast.Load()), kind

    def check_available(self, dotted: str, via: str) -> None:
        entry = vocabulary.lookup(dotted)
        missing = [m for m in self.models or () if entry is not None and m not in entry.models]
        if missing:
            only = " and ".join(entry.models)  # type: ignore[union-attr]
            raise self.fail(
                f"{dotted!r}{via} has no value for {' and '.join(missing)} models, which this "
                f"rule applies to (it has one for {only} models: `model_kind: {only}`)"
            )
        if self.allowed is None or dotted.split(".", 1)[0] in self.allowed:
            return
        readable = ", ".join(_namespace_text(ns) for ns in sorted(self.allowed))
        raise self.fail(
            f"{dotted!r}{via} is not available here ({self.context_label} may read {readable})"
        )

    def refer(self, ident: str) -> tuple[ast.expr, Kind]:
        named = self.named[ident]
        self.refers[ident] = None
        for dotted in sorted(named.names):
            self.check_available(dotted, f" (read by named formula {ident!r})")
        self.names |= named.names
        self.reads += len(named.names)
        if named.value is not None:
            return locate(ast.Constant(named.value)), named.kind
        self.uses[ident] = None
        return reference(ident), named.kind

    def binop(self, node: ast.BinOp) -> tuple[ast.expr, Kind]:
        symbol = _BINOPS.get(type(node.op))
        if symbol is None:
            raise self.fail("bitwise operators, shifts and '@' are not allowed")
        left, right = (self.need(side, "number", f"'{symbol}'") for side in (node.left, node.right))
        if symbol == "**":
            return ast.Call(ast.Name("_pow", ast.Load()), [left, right], []), "number"
        if symbol not in _GROWING:
            return ast.BinOp(left, node.op, right), "number"
        sides = {"left": left, "right": right}
        covered = {
            side: tree.value
            for side, tree in sides.items()
            if side in _COVERS[symbol] and isinstance(tree, Bounded) and not tree.covering
        }
        tree = ast.BinOp(covered.get("left", left), node.op, covered.get("right", right))
        return Bounded(tree, self.quote(node), covering=bool(covered)), "number"

    def unaryop(self, node: ast.UnaryOp) -> tuple[ast.expr, Kind]:
        if isinstance(node.op, ast.Invert):
            raise self.fail("bitwise operators, shifts and '@' are not allowed")
        kind: Kind = "bool" if isinstance(node.op, ast.Not) else "number"
        symbol = {ast.Not: "'not'", ast.USub: "unary '-'", ast.UAdd: "unary '+'"}[type(node.op)]
        return ast.UnaryOp(node.op, self.need(node.operand, kind, symbol)), kind

    def boolop(self, node: ast.BoolOp) -> tuple[ast.expr, Kind]:
        what = "'and'" if isinstance(node.op, ast.And) else "'or'"
        return ast.BoolOp(node.op, [self.need(v, "bool", what) for v in node.values]), "bool"

    def compare(self, node: ast.Compare) -> tuple[ast.expr, Kind]:
        nodes = [node.left, *node.comparators]
        sides = [self.visit(n) for n in nodes]
        for i, op in enumerate(node.ops):
            if type(op) in _ORDERING:
                for j in (i, i + 1):
                    what = f"'{_ORDERING[type(op)]}'"
                    sides[j] = (self.coerce(*sides[j], "number", what, nodes[j]), "number")
            elif type(op) in _EQUALITY:
                kinds = {sides[i][1], sides[i + 1][1]}
                if len(kinds) > 1 and "any" not in kinds:
                    a, b = (KIND_TEXT[sides[k][1]] for k in (i, i + 1))
                    raise self.fail(
                        f"'{_EQUALITY[type(op)]}' compares values of one type, not {a} with {b}"
                    )
            else:
                raise self.fail("'is' and 'in' are not allowed (use == and !=)")
        trees = [tree for tree, _ in sides]
        return ast.Compare(trees[0], node.ops, trees[1:]), "bool"

    def ifexp(self, node: ast.IfExp) -> tuple[ast.expr, Kind]:
        test = self.need(node.test, "bool", "the condition of 'x if c else y'")
        (body, kb), (orelse, ko) = self.visit(node.body), self.visit(node.orelse)
        if kb != ko and "any" not in (kb, ko):
            raise self.fail(
                f"both branches of 'x if c else y' need one type, not {KIND_TEXT[kb]} and {KIND_TEXT[ko]}"
            )
        return ast.IfExp(test, body, orelse), kb if kb == ko else "any"

    def call(self, node: ast.Call) -> tuple[ast.expr, Kind]:
        if node.keywords:
            raise self.fail("keyword arguments are not allowed")
        if any(isinstance(arg, ast.Starred) for arg in node.args):
            raise self.fail("starred arguments are not allowed")
        if not isinstance(node.func, ast.Name | ast.Attribute):
            raise self.fail("only the listed functions can be called (min, max, clamp, ...)")
        ident = self.dotted(node.func)
        function = vocabulary.FUNCTION_BY_NAME.get(ident)
        if function is None:
            if ident in self.named or vocabulary.lookup(ident) or ident in vocabulary.CONSTANTS:
                raise self.fail(f"{ident!r} is not a function")
            hint = _did_you_mean(ident, {}, [f.name for f in vocabulary.FUNCTIONS])
            raise self.fail(f"unknown function {ident!r}{hint}")
        given, low, high = len(node.args), function.min_args, function.max_args
        if given < low or (high is not None and given > high):
            wanted = (
                f"at least {low}" if high is None else (low if low == high else f"{low} to {high}")
            )
            raise self.fail(f"{ident}() takes {wanted} argument(s) ({given} given)")
        args = [self.need(arg, "number", f"{ident}()") for arg in node.args]
        tree = ast.Call(ast.Name(f"_fn_{ident}", ast.Load()), args, [])
        return (bounded(tree, self.quote(node)) if ident in _GROWING else tree), function.returns


_HANDLED = (ast.Constant, ast.Name, ast.Attribute, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare)
# Each handler takes the node type it is keyed by.
_HANDLERS: dict[type[ast.AST], Callable[..., tuple[ast.expr, Kind]]] = {
    n: getattr(Translator, n.__name__.lower()) for n in (*_HANDLED, ast.IfExp, ast.Call)
}


def _did_you_mean(
    name: str, named: Mapping[str, object], spellings: list[str] | None = None
) -> str:
    """` (did you mean 'x'?)` for the closest spelling, family members completed with `name`'s end."""
    candidates: dict[str, str] = {}
    families = {e.family_prefix: e.name for e in vocabulary.NAMES if e.family_prefix}
    for spelling in spellings or [*vocabulary.all_spellings(), *named]:
        candidates[spelling] = families.get(spelling, spelling)
        if spelling in families and "." in name:
            completed = spelling + name.rsplit(".", 1)[1]
            candidates[completed] = completed
    match = difflib.get_close_matches(name, list(candidates), n=1)
    return f" (did you mean {candidates[match[0]]!r}?)" if match else ""
