"""Syntax-tree plumbing of the formula compiler: walking and measuring trees, the inline
±MAX_MAGNITUDE check (`Bounded`), and turning a checked tree into a `Formula` whose code is
compiled when it is first evaluated.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping

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


def dag_depth(tree: ast.AST, shared: Mapping[int, int]) -> tuple[int, dict[int, int]]:
    """Nesting depth of a tree whose inlined named formulas are shared subtrees, and the depth
    of each node it visited. `shared` holds the depths of the named formulas' nodes (by id;
    those trees live as long as the library), so each is measured once, however often used."""
    depth: dict[int, int] = {}
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in depth or id(node) in shared:
            continue
        children = [node.value] if isinstance(node, Bounded) else _children(node)
        if children_done or not children:
            known = (depth.get(id(c)) or shared[id(c)] for c in children)
            depth[id(node)] = 1 + max(known, default=0)
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in children)
    top = depth.get(id(tree)) or shared[id(tree)]
    return top, depth


def locate(tree: ast.AST) -> ast.AST:
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
    and no user name starts with `_`. Made located, so that `locate` never walks it, and
    `dag_depth` counts it as one level over `value`. `covering`: `value` holds an operation
    whose check this one covers (see _COVERS)."""

    def __init__(self, value: ast.expr, what: str, covering: bool = False) -> None:
        self.value, self.covering = locate(value), covering
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


def bounded(tree: ast.expr, what: str) -> ast.expr:
    """`tree` checked against ±MAX_MAGNITUDE as it runs, unless it is checked already."""
    if isinstance(tree, ast.Constant | Bounded) or (
        isinstance(tree, ast.Call) and getattr(tree.func, "id", None) == "_pow"
    ):
        return tree
    return Bounded(tree, what)


def build(
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
        tree = bounded(tree, "the result")
    lam = locate(ast.Expression(ast.Lambda(args, tree)))
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
        fn = eval(compile(lam, "<formula>", "eval"), GLOBALS)
        object.__setattr__(formula, "_fn", fn)
        return fn(env)

    return compile_and_run
