"""What a template may say: every template, built-in or from `--templates DIR`, is parsed and
checked node by node before it is compiled (`check_template`), and rewritten so that what it
does when it runs is metered by the sandbox (render/sandbox.py owns the budgets).

Templates only format (STYLE.md); numbers are computed in Python or in rules. A template may use:

- text, `{{ output }}`, names, `.attr` and `[key]` (nothing starting with `_`), literals,
  comparisons (`==`, `<`, `in`, ...), `and`/`or`/`not`, `x if c else y`, `~` (join as text);
- `{% if %}`, `{% for %}` (not `recursive`), `{% set name = value %}` where the value is a
  name, an attribute, an item or a literal (an alias: nothing grows), and
  `{% include "literal/name.j2" %}`;
- the filters of FILTERS, each with literal arguments (numbers within ±MAX_LITERAL_ARG, text
  of at most MAX_LITERAL_TEXT characters) except the values of `format` and `default`;
  `format` only on a short literal with small widths;
- the tests of TESTS, and the zero-argument calls `.items()`, `.values()`, `.keys()`.

Anything else is refused at load with `name.j2:LINE: refused by the template sandbox: ...`:
arithmetic, other calls, macros, imports, `extends`, blocks that capture output.
"""

from __future__ import annotations

import re

import jinja2
from jinja2 import nodes
from jinja2.visitor import NodeTransformer

MAX_LITERAL_ARG = 1000  # widths, counts and precisions given to filters
MAX_LITERAL_TEXT = 64  # text given to filters: one filter grows a text ~65x at most
INTERNAL = "_"  # prefix of the filters the sandbox adds (a template cannot name them: FILTERS)

FILTERS = frozenset(
    {
        "json", "sh", "py", "py_name",  # parplan's own
        "abs", "capitalize", "center", "count", "d", "default", "dictsort", "e", "escape",
        "first", "float", "format", "int", "items", "join", "last", "length",
        "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse",
        "round", "select", "selectattr", "sort", "string", "sum", "title", "tojson", "trim",
        "truncate", "unique", "upper", "wordwrap",
    }
)  # fmt: skip
FREE_ARGUMENTS = frozenset({"format", "default", "d"})  # filters whose arguments are values
TESTS = frozenset(
    {
        "boolean", "defined", "divisibleby", "eq", "equalto", "escaped", "even", "false",
        "float", "ge", "greaterthan", "gt", "in", "integer", "iterable", "le", "lessthan",
        "lower", "lt", "mapping", "ne", "none", "number", "odd", "sameas", "sequence",
        "string", "true", "undefined", "upper",
    }
)  # fmt: skip
CALLS = frozenset({"items", "values", "keys"})
_PRINTF = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(\*|\d*)(?:\.(\*|\d*))?[a-zA-Z%]")
_ALIAS = (nodes.Name, nodes.Getattr, nodes.Getitem, nodes.Const)
_ALLOWED: tuple[type[nodes.Node], ...] = (
    nodes.Template, nodes.Output, nodes.TemplateData, nodes.Const, nodes.Name, nodes.Getattr,
    nodes.Getitem, nodes.Slice, nodes.Tuple, nodes.Compare, nodes.Operand, nodes.And, nodes.Or,
    nodes.Not, nodes.CondExpr, nodes.Concat, nodes.If, nodes.For, nodes.Assign, nodes.Include,
    nodes.Filter, nodes.Test, nodes.Call, nodes.Keyword,
)  # fmt: skip
_NAMED = {
    (nodes.Add, nodes.Sub, nodes.Mul, nodes.Div, nodes.FloorDiv, nodes.Mod, nodes.Pow, nodes.Neg,
     nodes.Pos): "arithmetic is not allowed: templates only format (compute in rules or Python)",
    (nodes.Macro, nodes.CallBlock): "macros are not allowed",
    (nodes.Import, nodes.FromImport, nodes.Extends, nodes.Block):
        "import, extends and block are not allowed",
    (nodes.AssignBlock, nodes.FilterBlock, nodes.With):
        "{% set %}...{% endset %}, {% filter %} and {% with %} blocks are not allowed",
    (nodes.List, nodes.Dict): "list and dict literals are not allowed",
}  # fmt: skip


class TemplateRefused(jinja2.TemplateSyntaxError):
    """A template uses something the sandbox does not allow (found when it is loaded)."""


def _refuse(node: nodes.Node, name: str, message: str) -> TemplateRefused:
    return TemplateRefused(message, node.lineno, name)


def _literal_args(node: nodes.Filter | nodes.Test, name: str) -> None:
    for arg in [*node.args, *(kw.value for kw in node.kwargs)]:
        if not isinstance(arg, nodes.Const):
            raise _refuse(arg, name, f"the arguments of '{node.name}' must be literals")
        value = arg.value
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if number and abs(value) > MAX_LITERAL_ARG:
            raise _refuse(arg, name, f"'{node.name}' argument {value} is above ±{MAX_LITERAL_ARG}")
        if isinstance(value, str) and len(value) > MAX_LITERAL_TEXT:
            message = f"'{node.name}' argument text is over {MAX_LITERAL_TEXT} characters"
            raise _refuse(arg, name, message)
    if node.dyn_args is not None or node.dyn_kwargs is not None:
        raise _refuse(node, name, "'*args' and '**kwargs' are not allowed")


def _check_filter(node: nodes.Filter, name: str) -> None:
    if node.name not in FILTERS:
        raise _refuse(node, name, f"filter '{node.name}' is not allowed")
    if node.name == "format":
        base = node.node
        if not (isinstance(base, nodes.Const) and isinstance(base.value, str)):
            raise _refuse(node, name, "'format' works only on a literal format string")
        if len(base.value) > MAX_LITERAL_TEXT:
            raise _refuse(
                node, name, f"format strings are limited to {MAX_LITERAL_TEXT} characters"
            )
        for width, precision in _PRINTF.findall(base.value):
            if "*" in (width, precision) or len(width) > 3 or len(precision) > 3:
                raise _refuse(
                    node, name, f"format {base.value!r}: widths above 999 are not allowed"
                )
    if node.name not in FREE_ARGUMENTS:
        _literal_args(node, name)
    if node.name == "map" and node.args:
        mapped = node.args[0].value  # type: ignore[attr-defined]  # literal: checked above
        if mapped not in FILTERS - {"map", "format"}:  # format: the items are formats
            raise _refuse(node, name, f"map('{mapped}'): filter '{mapped}' is not allowed")
    if node.name in ("select", "reject") and node.args:
        _check_test_name(node, node.args[0].value, name)  # type: ignore[attr-defined]
    if node.name in ("selectattr", "rejectattr") and len(node.args) > 1:
        _check_test_name(node, node.args[1].value, name)  # type: ignore[attr-defined]


def _check_test_name(node: nodes.Node, test: object, name: str) -> None:
    if test not in TESTS:
        raise _refuse(node, name, f"test '{test}' is not allowed")


def _check(node: nodes.Node, name: str) -> None:
    """Raise TemplateRefused for the first thing in `node` the sandbox does not allow."""
    for kinds, what in _NAMED.items():
        if isinstance(node, kinds):
            raise _refuse(node, name, what)
    if not isinstance(node, _ALLOWED):
        raise _refuse(node, name, f"'{type(node).__name__}' is not allowed")
    if isinstance(node, nodes.Name) and node.name.startswith("_"):
        raise _refuse(node, name, f"names starting with '_' are not allowed: {node.name}")
    if isinstance(node, nodes.Getattr) and node.attr.startswith("_"):
        raise _refuse(node, name, f"attributes starting with '_' are not allowed: {node.attr}")
    if isinstance(node, nodes.Getitem):
        key = node.arg
        if isinstance(key, nodes.Const) and str(key.value).startswith("_"):
            raise _refuse(node, name, f"keys starting with '_' are not allowed: {key.value}")
    if isinstance(node, nodes.Filter):
        _check_filter(node, name)
    if isinstance(node, nodes.Test):
        _check_test_name(node, node.name, name)
    if isinstance(node, nodes.Call):
        called = node.node
        if not (isinstance(called, nodes.Getattr) and called.attr in CALLS) or (
            node.args or node.kwargs or node.dyn_args or node.dyn_kwargs
        ):
            raise _refuse(node, name, "calls are not allowed (except .items(), .values(), .keys())")
    if isinstance(node, nodes.For) and node.recursive:
        raise _refuse(node, name, "recursive loops are not allowed")
    if isinstance(node, nodes.Assign) and not (
        isinstance(node.target, nodes.Name) and isinstance(node.node, _ALIAS)
    ):
        raise _refuse(node, name, "'set' may only name a value (a name, attribute, item, literal)")
    if isinstance(node, nodes.Include) and not (
        isinstance(node.template, nodes.Const) and isinstance(node.template.value, str)
    ):
        raise _refuse(node, name, "'include' needs a literal template name")
    for child in node.iter_child_nodes():
        _check(child, name)


class _Metered(NodeTransformer):
    """Rewrites a checked template so that each loop pays for its items from the budget, each
    value a filter, `~` or `{{ }}` takes or makes is checked to be plain data (and each text
    measured), and `.items()`, `.values()`, `.keys()` give lists."""

    @staticmethod
    def _through(method: str, node: nodes.Expr, *more: nodes.Expr) -> nodes.Filter:
        """`node` passed to the environment's `method`, as one of its INTERNAL filters (a
        filter is called directly; a call would go through the sandbox's checks each time)."""
        return nodes.Filter(node, INTERNAL + method, list(more), [], None, None, lineno=node.lineno)

    def _plain(self, node: nodes.Expr) -> nodes.Expr:
        return node if isinstance(node, nodes.Const) else self._through("plain", node)

    def visit_For(self, node: nodes.For) -> nodes.For:  # noqa: N802 - jinja2 visitor name
        self.generic_visit(node)  # rewrites `node`'s children in place and returns it
        assert isinstance(node.iter, nodes.Expr)  # typed Node by jinja2; the parser makes an Expr
        node.iter = self._through("loop_items", node.iter)
        return node

    def visit_Output(self, node: nodes.Output) -> nodes.Output:  # noqa: N802
        self.generic_visit(node)
        node.nodes = [
            n if isinstance(n, nodes.TemplateData) else self._plain(n) for n in node.nodes
        ]
        return node

    def visit_Filter(self, node: nodes.Filter) -> nodes.Filter:  # noqa: N802
        self.generic_visit(node)
        assert node.node is not None  # None only in a filter block, which _check refuses
        node.node = self._plain(node.node)
        node.args = [self._plain(arg) for arg in node.args]
        for keyword in node.kwargs:
            keyword.value = self._plain(keyword.value)
        return self._through("measured", node)

    def visit_Concat(self, node: nodes.Concat) -> nodes.Filter:  # noqa: N802
        self.generic_visit(node)
        node.nodes = [self._plain(n) for n in node.nodes]
        return self._through("measured", node)

    def visit_Call(self, node: nodes.Call) -> nodes.Filter:  # noqa: N802
        self.generic_visit(node)
        called = node.node  # `x.items` (the only calls _check lets through)
        assert isinstance(called, nodes.Getattr)
        return self._through("mapping_view", called.node, nodes.Const(called.attr))


def check_template(tree: nodes.Template, name: str) -> nodes.Template:
    """Check a parsed template and meter what it may cost when it runs."""
    _check(tree, name)
    return _Metered().visit(tree)
