"""Formulas: rule-file expressions, checked once at load, compiled when first evaluated (most
rules go unused by a command), evaluated many times.

A formula is data, never code. It is parsed with Python's parser (expression mode), every node
is checked against an allow-list, and the checked tree is compiled once into a small function
that runs with no builtins. Anything outside this language is a load error at the rule's
`file:line`:

- Values: numbers (`2`, `0.5`, `1e9`), strings (`'zero'`, `"x"`, at most 256 characters),
  `true`/`false` (also `True`/`False`).
- Names: the dotted names of `parplan_gen.rules.vocabulary` (`graph.depth`, `graph.op_count.MatMul`,
  `node.attr.flops`, ...), limited by where the formula appears (a node rule may read `graph.*`
  and `node.*`, ...), and the named formulas of the `formulas:` maps, which are inlined.
- Operators: `+ - * / // % **`, unary `-`/`+`, comparisons `< <= > >= == !=` (chains such as
  `1 < x <= 4` are fine), `not`, `and`, `or`, and `x if c else y`.
- Calls: only the functions of `parplan_gen.rules.vocabulary` (`min`, `max`, `clamp`, `ceil`, `log2`,
  ...), with positional arguments; the argument count is checked at load.
- Refused: names starting with `_`, attribute access except on vocabulary names, subscripts,
  lambda, comprehensions, f-strings, `:=`, `*args`/keyword arguments, bitwise operators and
  shifts, `is`/`in`, lists/tuples/dicts, bytes, `None`; a formula longer than 4000 characters,
  with more than 500 syntax nodes or nested deeper than 64 (a chain `a + b + ...` nests one
  level per term).
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
  taken) is computed at load, so such errors show up at load.

Named formulas (`formulas: {dp_speedup: "2.0 * clamp(graph.node_count / 10, 1, 2)"}`) are
plain identifiers usable by name in any formula; recursion between them is an error, and so is
one that grows beyond 5000 nodes, or nests deeper than 200, once the named formulas it uses are
inlined. A named formula that reads no name is computed at load, where its errors point.

Text templates (proposal descriptions) hold `{formula}` or `{formula:spec}` placeholders; the
spec is a restricted format spec (`[+-]`, width up to 2 digits, `.` and up to 2 digits of
precision, one of `d f g e E %`), e.g. `"{settings.dp} devices ({speedup:.1f}x)"`; `{{`/`}}`
are literal braces. A placeholder cannot contain braces, and the text after its last `:` is the
spec. Values are formatted with Python's `format` (a bool shows as `True`/`False`).
"""

from __future__ import annotations

import ast
import difflib
import keyword
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, NoReturn

from parplan_gen.inputs.errors import FormulaError, SourceRef
from parplan_gen.rules import vocabulary

Kind = Literal["number", "bool", "str", "any"]  # "any": a settings.* value, checked at runtime
Expect = Literal["number", "bool", "str"]
Value = str | int | float | bool

MAX_TEXT = 4000
MAX_STRING = 256
MAX_NODES = 500
MAX_DEPTH = 64
MAX_INLINED_NODES = 5000  # after inlining named formulas: stops blow-up through diamonds
MAX_INLINED_DEPTH = 200  # stays far below the depth at which Python's compiler gives up
# Every number a formula computes stays within ±MAX_MAGNITUDE: a float (max ~1.8e308) with room
# for the sums made of it (a formula's at most MAX_INLINED_NODES terms, the five memory parts),
# and an integer of at most 301 digits, which float() converts and str() prints (Python refuses
# str() beyond 4300 digits). Checked where a number can grow far beyond its operands (literals,
# `*`, `/`, `//`, `**`, exp()) and on the result; `+`/`-` at most double the larger operand.
MAX_MAGNITUDE = 1e300
_MAX_BITS = math.log2(MAX_MAGNITUDE) + 1  # `**` of integers above this is refused uncomputed
MAX_ROUND_DIGITS = 100  # round(5, -10**9) would build 10**(10**9)
ANY_NAMESPACES = frozenset({"settings"})  # declared "number", but settings may be any type
_SPEC = re.compile(r"[+-]?\d{0,2}(\.\d{1,2})?[dfgeE%]?", re.ASCII)
_A = {"number": "a number", "bool": "a bool (true/false)", "str": "a string", "any": "any value"}
_CONTEXT_LABELS = {"proposal_description": "proposal descriptions"}  # else "<context> rules"


class _RefusedError(Exception):
    """A runtime guard refused a value; `Formula.evaluate` names the formula and the place."""


def _show(x: object) -> str:
    if isinstance(x, int) and x.bit_length() > 64:
        return f"<{x.bit_length()}-bit integer>"
    return repr(x)


def _out_of_range(value: object, what: str) -> NoReturn:
    """Raise: `what` (quoted text of the formula, or "the result") gave `value` beyond the
    limit. Called by the compiled code (see `_bounded`) only when the value is out of range."""
    raise _RefusedError(
        f"{what} is out of range ({_show(value)}; numbers are limited to ±{MAX_MAGNITUDE:g})"
    )


def _pow(base: float, exp: float) -> float:
    """`base ** exp` that refuses results out of range (integer ones before computing them)
    and never goes complex."""
    if isinstance(base, int) and isinstance(exp, int) and exp >= 0:
        if abs(base) > 1 and (exp > _MAX_BITS or math.log2(abs(base)) * exp > _MAX_BITS):
            raise _power_too_large(base, exp)
        value = base**exp
    else:
        value = math.pow(base, exp)
    if -MAX_MAGNITUDE <= value <= MAX_MAGNITUDE:
        return value
    raise _power_too_large(base, exp)


def _power_too_large(base: float, exp: float) -> _RefusedError:
    return _RefusedError(f"power too large: {_show(base)} ** {_show(exp)}")


def _round(x: float, *digits: int) -> float:
    if digits and isinstance(digits[0], int) and abs(digits[0]) > MAX_ROUND_DIGITS:
        raise _RefusedError(
            f"round() digits must be within ±{MAX_ROUND_DIGITS}, got {_show(digits[0])}"
        )
    return round(x, *digits)


def _checker(kind: str, test: Callable[[object], bool]) -> Callable[[object, str], object]:
    def check(value: object, label: str) -> object:
        if test(value):
            return value
        raise _RefusedError(f"{label} is {value!r}, not {_A[kind]}")

    return check


_CHECKERS = {
    "number": _checker("number", lambda v: isinstance(v, int | float) and not isinstance(v, bool)),
    "bool": _checker("bool", lambda v: isinstance(v, bool)),
    "str": _checker("str", lambda v: isinstance(v, str)),
}
_IMPLS = {f.name: f.impl for f in vocabulary.FUNCTIONS} | {"round": _round}
_GLOBALS: dict[str, object] = {"__builtins__": {}, "_pow": _pow, "_out_of_range": _out_of_range}
_GLOBALS |= {f"_check_{k}": v for k, v in _CHECKERS.items()}
_GLOBALS |= {f"_fn_{k}": v for k, v in _IMPLS.items()}
_RUNTIME_ERRORS = (ArithmeticError, ValueError, TypeError, KeyError, _RefusedError)


@dataclass(frozen=True, slots=True, eq=False)
class Formula:
    """A checked, immutable formula; `evaluate(env)` reads dotted names from `env` (the code is
    compiled at the first evaluation)."""

    source: str
    where: SourceRef
    names: frozenset[str]
    kind: Kind
    is_constant: bool  # reads no names: computed once, at load
    _fn: Callable[[Mapping[str, object]], object] = field(repr=False)

    def evaluate(self, env: Mapping[str, object]) -> object:
        """The formula's value for `env`; a runtime failure is a FormulaError at `where`.
        A number is within ±MAX_MAGNITUDE (so never inf or NaN, which JSON cannot hold)."""
        try:
            return self._fn(env)
        except _RUNTIME_ERRORS as exc:
            message = f"formula {_short(self.source)!r} failed: {_reason(exc)}"
            raise FormulaError(message, self.where) from None


def _reason(exc: Exception) -> str:
    if isinstance(exc, KeyError):
        name = str(exc.args[0])
        if name.startswith("node.attr."):
            attr = name[len("node.attr.") :]
            return f"the node has no attribute {attr!r} (guard with node.has.{attr})"
        return f"{name!r} has no value here"
    if isinstance(exc, ZeroDivisionError):
        return "division by zero"
    return str(exc)


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def _children(node: ast.AST) -> list[ast.AST]:
    """`list(ast.iter_child_nodes(node))`, without its two generators: loading the rules walks
    every tree several times (size, depth, positions)."""
    found: list[ast.AST] = []
    for name in node._fields:
        value = getattr(node, name, None)
        if isinstance(value, ast.AST):
            found.append(value)
        elif isinstance(value, list):
            found += [item for item in value if isinstance(item, ast.AST)]
    return found


def _dag_depth(tree: ast.AST, shared: Mapping[int, int]) -> tuple[int, dict[int, int]]:
    """Nesting depth of a tree whose inlined named formulas are shared subtrees, and the depth
    of each node it visited. `shared` holds the depths of the named formulas' nodes (by id;
    those trees live as long as the library), so each is measured once, however often used."""
    depth: dict[int, int] = {}
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in depth or id(node) in shared:
            continue
        children = [node.value] if isinstance(node, _Bounded) else _children(node)
        if children_done or not children:
            known = (depth.get(id(c)) or shared[id(c)] for c in children)
            depth[id(node)] = 1 + max(known, default=0)
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in children)
    top = depth.get(id(tree)) or shared[id(tree)]
    return top, depth


def _locate(tree: ast.AST) -> ast.AST:
    """`ast.fix_missing_locations` that does not enter located nodes: the compiler only ever
    locates whole subtrees, so below a located node (a named formula's, a part translated
    before) everything is located already."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if "lineno" in node._attributes:
            if getattr(node, "lineno", None) is not None:
                continue
            _at(node)  # type: ignore[arg-type]
        stack.extend(_children(node))
    return tree


def _measure(tree: ast.AST, max_nodes: int) -> tuple[int, int]:
    """(node count, nesting depth), stopping early once the count passes `max_nodes`."""
    count, depth, stack = 0, 0, [(tree, 1)]
    while stack and count <= max_nodes:
        node, level = stack.pop()
        count, depth = count + 1, max(depth, level)
        stack.extend((child, level + 1) for child in _children(node))
    return count, depth


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


class _Bounded(ast.IfExp):
    """`(_t if -MAX <= (_t := value) <= MAX else _out_of_range(_t, what))`: `value` checked
    inline (a call would cost ~3x as much at run time). `_t` is local to the formula's lambda,
    and no user name starts with `_`. Made located, so that `_locate` never walks it, and
    `_dag_depth` counts it as one level over `value`. `covering`: `value` holds an operation
    whose check this one covers (see _COVERS)."""

    def __init__(self, value: ast.expr, what: str, covering: bool = False) -> None:
        self.value, self.covering = _locate(value), covering
        limits = [_at(ast.Constant(-MAX_MAGNITUDE)), _at(ast.Constant(MAX_MAGNITUDE))]
        walrus = _at(ast.NamedExpr(_at(ast.Name("_t", ast.Store())), value))
        test = _at(ast.Compare(limits[0], [ast.LtE(), ast.LtE()], [walrus, limits[1]]))
        args = [_at(ast.Name("_t", ast.Load())), _at(ast.Constant(what))]
        refuse = _at(ast.Call(_at(ast.Name("_out_of_range", ast.Load())), args, []))
        super().__init__(test, _at(ast.Name("_t", ast.Load())), refuse)
        _at(self)


def _at(node: ast.expr) -> ast.expr:
    """`node` with the position every made-up node has (line 1, column 0)."""
    node.lineno, node.col_offset, node.end_lineno, node.end_col_offset = 1, 0, 1, 0
    return node


def _bounded(tree: ast.expr, what: str) -> ast.expr:
    """`tree` checked against ±MAX_MAGNITUDE as it runs, unless it is checked already."""
    if isinstance(tree, ast.Constant | _Bounded) or (
        isinstance(tree, ast.Call) and getattr(tree.func, "id", None) == "_pow"
    ):
        return tree
    return _Bounded(tree, what)


_ORDERING = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_EQUALITY = {ast.Eq: "==", ast.NotEq: "!="}


@dataclass(frozen=True)
class _Named:
    """A named formula, checked in no particular context, with its own references inlined."""

    tree: ast.expr
    kind: Kind
    names: frozenset[str]
    size: int


def _namespace_text(namespace: str) -> str:
    return namespace if vocabulary.lookup(namespace) else namespace + ".*"


class _Translator:
    """Checks one formula against the language and rewrites it into an evaluable tree.

    Vocabulary names become `_e["dotted.name"]`, `**` becomes `_pow(a, b)`, `f(...)` becomes
    `_fn_f(...)`, named formulas are inlined, and "any" values where a number or bool is
    needed are wrapped in a runtime check. User names can't start with `_`, so none collide.
    """

    def __init__(
        self,
        text: str,
        where: SourceRef,
        context: str | None,
        named: Mapping[str, _Named],
        shared: dict[int, int] | None = None,
        models: tuple[str, ...] | None = None,
    ) -> None:
        self.text, self.where, self.named = text, where, named
        self.shared = {} if shared is None else shared  # named formulas' node depths, by id
        self.allowed = None if context is None else vocabulary.CONTEXTS[context]
        self.models = models  # the kinds of model the rule applies to (None: any name goes)
        self.context_label = _CONTEXT_LABELS.get(str(context), f"{context} rules")
        self.names: set[str] = set()
        self.reads = 0  # vocabulary names read so far, counting repeats (0: a constant part)
        self.lines: tuple[bytes, list[int]] | None = None  # for `quote`, made when first needed
        self.budget = MAX_INLINED_NODES

    def fail(self, reason: str) -> FormulaError:
        return FormulaError(f"formula {_short(self.text)!r}: {reason}", self.where)

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
        count, depth = _measure(tree, MAX_NODES)
        if count > MAX_NODES:
            raise self.fail(f"too complex (more than {MAX_NODES} syntax nodes)")
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH}")
        self.budget -= count
        return tree

    def translate(self, value: Value) -> tuple[ast.expr, Kind]:
        """The evaluable tree and kind of a rule value (a number, a bool or formula text)."""
        if isinstance(value, bool | int | float):
            return self.constant(ast.Constant(value))
        if not isinstance(value, str):
            raise self.fail(f"a formula must be a number, true/false or text, not {value!r}")
        tree, kind = self.visit(self.parse())
        depth, self.depths = _dag_depth(tree, self.shared)
        if depth > MAX_INLINED_DEPTH:
            raise self.fail(
                f"nested deeper than {MAX_INLINED_DEPTH} once named formulas are inlined"
            )
        return _locate(tree), kind

    def visit(self, node: ast.AST) -> tuple[ast.expr, Kind]:
        """The evaluable tree and kind of `node`; a part that reads no name is computed now
        (bottom-up, so each step evaluates one operation), so that its errors are load errors."""
        handler = _HANDLERS.get(type(node))
        if handler is None:
            raise self.fail(_FORBIDDEN.get(type(node), f"{type(node).__name__} is not allowed"))
        reads = self.reads
        tree, kind = handler(self, node)
        if self.reads == reads and not isinstance(tree, ast.Constant):
            checked = _bounded(tree, self.quote(node)) if kind == "number" else tree
            value = _build(self.text, self.where, checked, kind, frozenset()).evaluate({})
            tree = _locate(ast.Constant(value))
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
        return repr(_short(source[start:end].decode()))

    def coerce(
        self, tree: ast.expr, kind: Kind, want: Kind, what: str, node: ast.AST | str
    ) -> ast.expr:
        """`tree` where a `want` is needed: as is, checked at runtime ("any"), or an error."""
        if kind == want:
            return tree
        label = _short(node if isinstance(node, str) else ast.unparse(node))
        if kind == "any":
            check = ast.Name(f"_check_{want}", ast.Load())
            return ast.Call(check, [tree, ast.Constant(label)], [])
        raise self.fail(f"{what} needs {_A[want]}, but {label!r} is {_A[kind]}")

    def need(self, node: ast.expr, want: Kind, what: str) -> ast.expr:
        return self.coerce(*self.visit(node), want, what, node)

    def constant(self, node: ast.Constant) -> tuple[ast.expr, Kind]:
        value = node.value
        if isinstance(value, bool):
            return _locate(ast.Constant(value)), "bool"
        if isinstance(value, int | float):
            if isinstance(value, float) and not math.isfinite(value):
                raise self.fail(f"{value!r} is not a finite number")
            if not -MAX_MAGNITUDE <= value <= MAX_MAGNITUDE:
                raise self.fail(
                    f"{_show(value)} is out of range (numbers are limited to ±{MAX_MAGNITUDE:g})"
                )
            return _locate(ast.Constant(value)), "number"
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
            return ast.Constant(vocabulary.CONSTANTS[ident]), "bool"
        if ident in self.named:
            return self.inline(ident)
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

    def inline(self, ident: str) -> tuple[ast.expr, Kind]:
        named = self.named[ident]
        self.budget -= named.size
        if self.budget < 0:
            raise self.fail(
                f"too large once named formulas are inlined (over {MAX_INLINED_NODES} nodes)"
            )
        for dotted in sorted(named.names):
            self.check_available(dotted, f" (read by named formula {ident!r})")
        self.names |= named.names
        self.reads += len(named.names)
        return named.tree, named.kind  # shared, never mutated: compile() accepts a DAG

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
            if side in _COVERS[symbol] and isinstance(tree, _Bounded) and not tree.covering
        }
        tree = ast.BinOp(**{**sides, **covered}, op=node.op)
        return _Bounded(tree, self.quote(node), covering=bool(covered)), "number"

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
        sides = [list(self.visit(n)) for n in nodes]
        for i, op in enumerate(node.ops):
            if type(op) in _ORDERING:
                for j in (i, i + 1):
                    what = f"'{_ORDERING[type(op)]}'"
                    sides[j] = [self.coerce(*sides[j], "number", what, nodes[j]), "number"]
            elif type(op) in _EQUALITY:
                kinds = {sides[i][1], sides[i + 1][1]}
                if len(kinds) > 1 and "any" not in kinds:
                    a, b = (_A[sides[k][1]] for k in (i, i + 1))
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
                f"both branches of 'x if c else y' need one type, not {_A[kb]} and {_A[ko]}"
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
        return (_bounded(tree, self.quote(node)) if ident in _GROWING else tree), function.returns


_HANDLED = (ast.Constant, ast.Name, ast.Attribute, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare)
_HANDLERS = {n: getattr(_Translator, n.__name__.lower()) for n in (*_HANDLED, ast.IfExp, ast.Call)}


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


def _build(
    source: str,
    where: SourceRef,
    tree: ast.expr,
    kind: Kind,
    names: frozenset[str],
) -> Formula:
    args = ast.arguments(
        posonlyargs=[], args=[ast.arg("_e")], kwonlyargs=[], kw_defaults=[], defaults=[]
    )
    if kind == "number":
        tree = _bounded(tree, "the result")
    lam = _locate(ast.Expression(ast.Lambda(args, tree)))
    formula = Formula(source, where, names, kind, not names, lambda _e: None)
    object.__setattr__(formula, "_fn", _compile_on_first_use(formula, lam))
    if names:
        return formula
    value = formula.evaluate({})  # computed now, so that its errors are load errors
    return Formula(source, where, names, kind, True, lambda _e: value)


def _compile_on_first_use(
    formula: Formula, lam: ast.Expression
) -> Callable[[Mapping[str, object]], object]:
    """A function that compiles `lam` (checked already), puts the result in `formula`'s place
    and runs it. Compiling is most of the cost of loading rules, and a command evaluates few of
    them (no graph-model formula for a transformer, ...)."""

    def compile_and_run(env: Mapping[str, object]) -> object:
        # Safe: the tree was rebuilt node by node from the allow-list; no builtins are visible.
        fn = eval(compile(lam, "<formula>", "eval"), _GLOBALS)
        object.__setattr__(formula, "_fn", fn)
        return fn(env)

    return compile_and_run


class TextTemplate:
    """Text with `{formula}` / `{formula:spec}` placeholders; `{{` and `}}` are braces."""

    def __init__(
        self, source: str, where: SourceRef, parts: list[str | tuple[Formula, str]]
    ) -> None:
        self.source, self.where, self._parts = source, where, tuple(parts)
        self.names = frozenset().union(*(p[0].names for p in parts if isinstance(p, tuple)))

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
                    f"placeholder {{{formula.source}:{spec}}} cannot format {_show(value)}: {exc}",
                    self.where,
                ) from None
        return "".join(out)


def _split_template(text: str, where: SourceRef) -> list[str | tuple[str, str]]:
    """Literal text and (formula, spec) pairs, with `{{`/`}}` unescaped."""
    parts: list[str | tuple[str, str]] = []
    pieces = re.split(r"(\{\{|\}\}|\{[^{}]*\}|[{}])", text)
    for i, piece in enumerate(pieces):
        if i % 2 == 0 or piece in ("{{", "}}"):
            parts.append(piece[0] if i % 2 else piece)
        elif piece in ("{", "}"):
            column = len("".join(pieces[:i])) + 1
            raise FormulaError(
                f"text {_short(text)!r}: unmatched {piece!r} at column {column} "
                f"(write {piece * 2!r} for a literal brace)",
                where,
            )
        else:
            expr, colon, spec = piece[1:-1].rpartition(":")
            expr, spec = (expr, spec) if colon else (spec, "")
            if not _SPEC.fullmatch(spec):
                raise FormulaError(
                    f"text {_short(text)!r}: format spec {spec!r} is not allowed "
                    "(e.g. 'd', '.1f', '+.2%')",
                    where,
                )
            parts.append((expr, spec))
    return parts


class FormulaLibrary:
    """The named formulas of all rule files, and the compiler of every other formula."""

    def __init__(self, named: Mapping[str, tuple[Value, SourceRef]]) -> None:
        for name, (_, where) in named.items():
            _check_formula_name(name, where)
        refs = {name: _references(value, where, named) for name, (value, where) in named.items()}
        self._named: dict[str, _Named] = {}
        self._shared: dict[int, int] = {}  # the named formulas' node depths, by id
        for name in _dependency_order(refs, {n: w for n, (_, w) in named.items()}):
            value, where = named[name]
            translator = _Translator(str(value), where, None, self._named, self._shared)
            tree, kind = translator.translate(value)
            names = frozenset(translator.names)
            size = MAX_INLINED_NODES - translator.budget
            if not names:  # computed at load (its failure is reported here), inlined as a value
                constant = _build(str(value), where, tree, kind, names)
                tree, size = _locate(ast.Constant(constant.evaluate({}))), 1
                translator.depths = {id(tree): 1}
            self._shared.update(getattr(translator, "depths", {}))
            self._named[name] = _Named(tree, kind, names, size)
        self._order = tuple(named)

    @property
    def names(self) -> tuple[str, ...]:
        """The named formulas, in the order given."""
        return self._order

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
        source = value if isinstance(value, str) else repr(value)
        translator = _Translator(source, where, context, self._named, self._shared, models)
        tree, kind = translator.translate(value)
        if expect is not None and kind != expect:
            if kind != "any":
                raise translator.fail(f"gives {_A[kind]}, but {_A[expect]} is needed here")
            tree, kind = translator.coerce(tree, kind, expect, "", source), expect
        return _build(source, where, tree, kind, frozenset(translator.names))

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


def _check_formula_name(name: str, where: SourceRef) -> None:
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        raise FormulaError(
            f"named formula {name!r}: a name must be a plain identifier "
            "(letters, digits and '_', no dots, not starting with '_')",
            where,
        )
    if name in _CLASHES:
        raise FormulaError(
            f"named formula {name!r} clashes with {_CLASHES[name]} of the same name", where
        )


_CLASHES = {entry.namespace: "a vocabulary namespace" for entry in vocabulary.NAMES}
_CLASHES |= {constant: "a constant" for constant in vocabulary.CONSTANTS}
_CLASHES |= {function: "a function" for function in vocabulary.FUNCTION_BY_NAME}


def _references(value: Value, where: SourceRef, named: Mapping[str, object]) -> list[str]:
    """The named formulas `value` mentions, in order of first mention (checks its syntax)."""
    if not isinstance(value, str):
        return []
    tree = _Translator(value, where, None, {}).parse()
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
