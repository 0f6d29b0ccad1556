"""Syntax-tree plumbing of the formula compiler: walking and measuring trees, the inline
±MAX_MAGNITUDE check (`Bounded`), references to named formulas, and turning a checked tree into
a `Formula` (or a named formula's function) whose code is compiled when it is first evaluated.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from parplan_gen.inputs.errors import SourceRef
from parplan_gen.rules.formula_runtime import GLOBALS, MAX_MAGNITUDE, Formula, Kind


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


_Tree = TypeVar("_Tree", bound=ast.AST)


def locate(tree: _Tree) -> _Tree:
    """`ast.fix_missing_locations` that does not enter located nodes: the compiler only ever
    locates whole subtrees, so below a located node (a part translated before) everything is
    located already."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if "lineno" in node._attributes:
            if getattr(node, "lineno", None) is not None:
                continue
            _at(node)  # type: ignore[arg-type]
        stack.extend(_children(node))
    return tree


def measure(tree: ast.AST, max_nodes: int) -> tuple[int, int]:
    """(node count, nesting depth), stopping early once the count passes `max_nodes`."""
    count, depth, stack = 0, 0, [(tree, 1)]
    while stack and count <= max_nodes:
        node, level = stack.pop()
        count, depth = count + 1, max(depth, level)
        stack.extend((child, level + 1) for child in _children(node))
    return count, depth


class Bounded(ast.IfExp):
    """`(_t if -MAX <= (_t := value) <= MAX else _out_of_range(_t, what))`: `value` checked
    inline (a call would cost ~3x as much at run time). `_t` is local to the formula's lambda,
    and no user name starts with `_`. Made located, so that `locate` never walks it.
    `covering`: `value` holds an operation whose check this one covers (see _COVERS)."""

    def __init__(self, value: ast.expr, what: str, covering: bool = False) -> None:
        self.value, self.covering = locate(value), covering
        limits = [_at(ast.Constant(-MAX_MAGNITUDE)), _at(ast.Constant(MAX_MAGNITUDE))]
        target = ast.Name("_t", ast.Store())
        _at(target)
        walrus = _at(ast.NamedExpr(target, value))
        test = _at(ast.Compare(limits[0], [ast.LtE(), ast.LtE()], [walrus, limits[1]]))
        args = [_at(ast.Name("_t", ast.Load())), _at(ast.Constant(what))]
        refuse = _at(ast.Call(_at(ast.Name("_out_of_range", ast.Load())), args, []))
        super().__init__(test, _at(ast.Name("_t", ast.Load())), refuse)
        _at(self)


def _at(node: ast.expr) -> ast.expr:
    """`node` with the position every made-up node has (line 1, column 0)."""
    node.lineno, node.col_offset, node.end_lineno, node.end_col_offset = 1, 0, 1, 0
    return node


def bounded(tree: ast.expr, what: str) -> ast.expr:
    """`tree` checked against ±MAX_MAGNITUDE as it runs, unless it is checked already."""
    if isinstance(tree, ast.Constant | Bounded) or (
        isinstance(tree, ast.Call) and getattr(tree.func, "id", None) == "_pow"
    ):
        return tree
    return Bounded(tree, what)


_FOLDED: dict[type[ast.AST], Callable[..., Any]] = {ast.Add: operator.add, ast.Sub: operator.sub}
_FOLDED |= {ast.Mult: operator.mul, ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv}
_FOLDED |= {ast.Mod: operator.mod, ast.USub: operator.neg, ast.UAdd: operator.pos}


def folded(tree: ast.expr) -> ast.Constant | None:
    """The value of `tree`, when it is one arithmetic step on numbers (`2 * 16384`, `-1`, the
    steps of a part that reads no name, computed bottom-up) whose result is within
    ±MAX_MAGNITUDE, as a Constant, with nothing compiled: what running it would give. None
    otherwise: the caller compiles and runs it, and reports its failure as it always has."""
    node = tree.value if isinstance(tree, Bounded) else tree
    if isinstance(node, ast.BinOp):
        operands = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp):
        operands = [node.operand]
    else:
        return None
    operation = _FOLDED.get(type(node.op))
    numbers = [o.value for o in operands if isinstance(o, ast.Constant)]
    if operation is None or len(numbers) < len(operands):
        return None
    if any(isinstance(n, bool) or not isinstance(n, int | float) for n in numbers):
        return None
    try:
        value = operation(*numbers)
    except ArithmeticError:
        return None
    return ast.Constant(value) if -MAX_MAGNITUDE <= value <= MAX_MAGNITUDE else None


def _lambda(tree: ast.expr) -> ast.Expression:
    """`lambda _e, _m: tree`: `_e` the environment of dotted names, `_m` the values of the named
    formulas computed so far for it (see `reference`)."""
    params = [ast.arg("_e"), ast.arg("_m")]
    args = ast.arguments(posonlyargs=[], args=params, kwonlyargs=[], kw_defaults=[], defaults=[])
    return locate(ast.Expression(ast.Lambda(args, tree)))


def reference(name: str) -> ast.expr:
    """`(_m[name] if name in _m else _n_<name>(_e, _m))`: the value of named formula `name`,
    computed at most once per memo (`Formula.evaluate`), and only when this part runs (a branch
    not taken computes nothing). `_n_<name>` is its function (`named_function`) in the
    library's globals; no user name starts with `_`."""
    memo, key = _at(ast.Name("_m", ast.Load())), _at(ast.Constant(name))
    test = _at(ast.Compare(key, [ast.In()], [memo]))
    hit = _at(ast.Subscript(memo, key, ast.Load()))
    args = [_at(ast.Name("_e", ast.Load())), memo]
    miss = _at(ast.Call(_at(ast.Name(f"_n_{name}", ast.Load())), args, []))
    return _at(ast.IfExp(test, hit, miss))


def named_function(
    name: str, tree: ast.expr, kind: Kind, namespace: dict[str, object]
) -> Callable[[Mapping[str, object], dict[str, object]], object]:
    """The function of named formula `name`, `_m.setdefault(name, tree)`: computes its value
    and keeps it in the memo `_m`. A number is checked against ±MAX_MAGNITUDE as a result is,
    so that sums of named values stay finite however the named formulas are combined. Compiled
    when first called, into `namespace` (the library's globals) under `_n_<name>`."""

    def compile_and_run(env: Mapping[str, object], memo: dict[str, object]) -> object:
        checked = bounded(tree, f"named formula {name!r}") if kind == "number" else tree
        store = _at(ast.Attribute(_at(ast.Name("_m", ast.Load())), "setdefault", ast.Load()))
        lam = _lambda(_at(ast.Call(store, [_at(ast.Constant(name)), checked], [])))
        # Safe: the tree was rebuilt node by node from the allow-list; no builtins are visible.
        fn = eval(compile(lam, "<formula>", "eval"), namespace)
        namespace[f"_n_{name}"] = fn
        return fn(env, memo)

    return compile_and_run


def build(
    source: str,
    where: SourceRef,
    tree: ast.expr,
    kind: Kind,
    names: frozenset[str],
    namespace: dict[str, object] | None = None,
    refers: tuple[str, ...] = (),
) -> Formula:
    """The Formula of a checked tree; `namespace`: the globals its code runs with (the
    library's, which hold its named formulas' functions; GLOBALS for a tree without them);
    `refers`: the named formulas it uses directly."""
    if kind == "number":
        tree = bounded(tree, "the result")
    constant = (tree if isinstance(tree, ast.Constant) else folded(tree)) if not names else None
    if constant is not None:  # its value, with nothing to compile
        known = constant.value
        return Formula(source, where, names, kind, True, lambda _e, _m: known, refers)
    lam = _lambda(tree)
    formula = Formula(source, where, names, kind, not names, lambda _e, _m: None, refers)
    object.__setattr__(formula, "_fn", _compile_on_first_use(formula, lam, namespace or GLOBALS))
    if names:
        return formula
    value = formula.evaluate({})  # computed now, so that its errors are load errors
    return Formula(source, where, names, kind, True, lambda _e, _m: value, refers)


def _compile_on_first_use(
    formula: Formula, lam: ast.Expression, namespace: dict[str, object]
) -> Callable[[Mapping[str, object], dict[str, object]], object]:
    """A function that compiles `lam` (checked already), puts the result in `formula`'s place
    and runs it. Compiling is most of the cost of loading rules, and a command evaluates few of
    them (no graph-model formula for a transformer, ...)."""

    def compile_and_run(env: Mapping[str, object], memo: dict[str, object]) -> object:
        # Safe: the tree was rebuilt node by node from the allow-list; no builtins are visible.
        fn = eval(compile(lam, "<formula>", "eval"), namespace)
        object.__setattr__(formula, "_fn", fn)
        return fn(env, memo)

    return compile_and_run
