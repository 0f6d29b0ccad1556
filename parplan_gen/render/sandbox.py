"""The template sandbox: what a template may say, checked when it is loaded, and what it may cost.

Templates only format (STYLE.md); numbers are computed in Python or in rules. Every template,
built-in or from `--templates DIR`, is parsed and checked node by node before it is compiled.
A template may use:

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
arithmetic, other calls, macros, imports, `extends`, blocks that capture output. When it runs,
a template is in Jinja's immutable sandbox (no unsafe attribute, no mutation), its loops take
at most MAX_LOOP_ITEMS items in all, each text a filter or `~` makes at most MAX_VALUE_CHARS
characters (so a chain of filters cannot grow without bound), its output at most
MAX_OUTPUT_CHARS characters (the three grow with the cluster), and an include that reaches
itself is stopped: a rendered file costs bounded time and memory.

A template sees plain data only (PLAIN: text, numbers, booleans, None, lists and mappings):
there are no globals (`range`, `cycler`, `lipsum`...), an attribute or item that is anything
else (a method, a loop object, a class) is refused when it is reached, by a filter
(`map(attribute=...)`, `sort(attribute=...)`, `selectattr`) as much as by `.name`, and so is
printing, joining or filtering a special name (`self`, `loop`): nothing non-deterministic,
such as an object's address, reaches a file. An attribute the sandbox finds unsafe is refused
where it is reached, not turned into an undefined value. Templates are read from inside their
folder only: a link that leads out of it (to /etc/passwd, say) is refused, and its content
never shown. A checked template is compiled once per process (COMPILED, by its text and the
environment's options), however many environments render it.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path
from types import CodeType
from typing import Any, NoReturn

import jinja2
from jinja2 import nodes
from jinja2.loaders import split_template_path
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError
from jinja2.visitor import NodeTransformer

from parplan_gen.inputs.safe_text import printable
from parplan_gen.inputs.source import read_text

# Per rendered file, plus as much again per unit of `scale` (render.py: the cluster's nodes,
# so that a hostfile of 131,072 nodes still renders while a runaway loop stops within ~10 ms).
MAX_LOOP_ITEMS, LOOP_ITEMS_PER_UNIT = 20_000, 8
MAX_OUTPUT_CHARS, OUTPUT_CHARS_PER_UNIT = 4 * 1024 * 1024, 512
MAX_VALUE_CHARS, VALUE_CHARS_PER_UNIT = 1024 * 1024, 64
MAX_LITERAL_ARG = 1000  # widths, counts and precisions given to filters
MAX_LITERAL_TEXT = 64  # text given to filters: one filter grows a text ~65x at most
REFUSED = "refused by the template sandbox"
# Compiled templates kept for the process, across environments (a few dozen: the shipped
# templates, the ones of a --templates folder), least recently used dropped first.
COMPILED_KEPT = 256
COMPILED: OrderedDict[tuple[Any, ...], CodeType] = OrderedDict()
_COMPILE_OPTIONS = (  # what Jinja's lexer and compiler read besides the text (get_lexer's key)
    "block_start_string", "block_end_string", "variable_start_string", "variable_end_string",
    "comment_start_string", "comment_end_string", "line_statement_prefix",
    "line_comment_prefix", "trim_blocks", "lstrip_blocks", "newline_sequence",
    "keep_trailing_newline", "optimized", "is_async",
)  # fmt: skip
PLAIN = (str, int, float, bool, type(None), list, tuple, dict)  # what a template may handle
INTERNAL = "_"  # prefix of the filters the sandbox adds (a template cannot name them: FILTERS)
_HANDLED = (*PLAIN, jinja2.Undefined)  # an undefined value raises its own error when used

FILTERS = frozenset(
    {
        "json", "sh",  # parplan's own
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


class TemplateBudgetError(Exception):
    """A template ran past a bound while rendering (loop items or output size)."""


class NotPlainDataError(SecurityError):
    """A template reached for something that is not plain data (a method, a loop object)."""


class OutsideFolderError(SecurityError):
    """A template (or mapping.yaml) is a link to a file outside its template folder."""


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
        node = self.generic_visit(node)
        node.iter = self._through("loop_items", node.iter)
        return node

    def visit_Output(self, node: nodes.Output) -> nodes.Output:  # noqa: N802
        node = self.generic_visit(node)
        node.nodes = [
            n if isinstance(n, nodes.TemplateData) else self._plain(n) for n in node.nodes
        ]
        return node

    def visit_Filter(self, node: nodes.Filter) -> nodes.Filter:  # noqa: N802
        node = self.generic_visit(node)
        node.node = self._plain(node.node)
        node.args = [self._plain(arg) for arg in node.args]
        for keyword in node.kwargs:
            keyword.value = self._plain(keyword.value)
        return self._through("measured", node)

    def visit_Concat(self, node: nodes.Concat) -> nodes.Filter:  # noqa: N802
        node = self.generic_visit(node)
        node.nodes = [self._plain(n) for n in node.nodes]
        return self._through("measured", node)

    def visit_Call(self, node: nodes.Call) -> nodes.Filter:  # noqa: N802
        called = self.generic_visit(node).node  # `x.items` (the only calls _check lets through)
        return self._through("mapping_view", called.node, nodes.Const(called.attr))


def check_template(tree: nodes.Template, name: str) -> nodes.Template:
    """Check a parsed template and meter what it may cost when it runs."""
    _check(tree, name)
    return _Metered().visit(tree)


def file_inside(folder: Path, relative: str | Path) -> Path | None:
    """`folder/relative` when it is a file, None when there is none; OutsideFolderError when it is a
    link (or under a linked folder) that leads outside `folder`."""
    path = folder / relative
    if not path.is_file():
        return None
    if not path.resolve().is_relative_to(folder.resolve()):
        raise OutsideFolderError(
            f"{Path(relative).as_posix()} in {folder} is a link to a file outside that folder "
            "(templates are read from inside their folder only)"
        )
    return path


def _stamp(path: Path) -> tuple[int, int, int, int]:
    """What changes when a file is edited or another one (a link, too) takes its place."""
    info = path.stat()
    return info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size


def _unchanged(earlier: list[Path], path: Path, stamp: tuple[int, int, int, int]) -> bool:
    """Whether a template read from `path` still is: no folder before its own has gained the
    file (`earlier`), and `path` is the file it was (a link put in its place is checked again
    when it is read)."""
    try:
        return not any(p.is_file() for p in earlier) and _stamp(path) == stamp
    except OSError:
        return False


class _CheckedLoader(jinja2.BaseLoader):
    """Loads from the template folders (first match wins), checking each template first."""

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str, Callable[[], bool]]:
        relative = Path(*split_template_path(template))  # refuses '..'
        for index, folder in enumerate(self.folders):
            path = file_inside(folder, relative)
            if path is not None:
                earlier = [f / relative for f in self.folders[:index]]
                uptodate = partial(_unchanged, earlier, path, _stamp(path))
                return read_text(path), str(path), uptodate
        raise jinja2.TemplateNotFound(template)

    def load(
        self,
        environment: jinja2.Environment,
        name: str,
        globals: Any = None,  # jinja2's own parameter name
    ) -> jinja2.Template:
        source, filename, uptodate = self.get_source(environment, name)
        code = _compiled(environment, name, filename, source)
        return environment.template_class.from_code(environment, code, globals or {}, uptodate)


def _compiled(environment: jinja2.Environment, name: str, filename: str, source: str) -> CodeType:
    """The checked, metered template compiled: from COMPILED when the same text was compiled
    for the same name, file and options before (by this environment or another)."""
    options = tuple(getattr(environment, option) for option in _COMPILE_OPTIONS)
    escapes = environment.autoescape
    escaped = escapes(name) if callable(escapes) else escapes
    digest = hashlib.sha256(source.encode("utf-8", "surrogatepass")).digest()
    key = (name, filename, digest, escaped, options)
    code = COMPILED.pop(key, None)
    if code is None:
        try:
            tree = check_template(environment.parse(source, name, filename), name)
            code = environment.compile(tree, name, filename)
        except RecursionError:  # Jinja's parser and compiler recurse once per level
            raise TemplateRefused("expressions or blocks nested too deeply", 1, name) from None
    COMPILED[key] = code  # the most recently used last
    while len(COMPILED) > COMPILED_KEPT:
        COMPILED.popitem(last=False)
    return code


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox over checked templates, with a budget for each rendered file."""

    def __init__(self, folders: list[Path], **options: Any) -> None:
        super().__init__(loader=_CheckedLoader(folders), **options)
        self.globals.clear()  # range, cycler, joiner, lipsum, namespace, dict: not data
        for method in (self.loop_items, self.measured, self.plain, self.mapping_view):
            self.filters[INTERNAL + method.__name__] = method
        self.items_budget = self.items_left = MAX_LOOP_ITEMS
        self.value_limit = MAX_VALUE_CHARS

    def measured(self, value: Any) -> Any:
        """`value` as plain data (what an iterator yields, as a list paid from the loop
        budget), unless it is a text longer than the limit."""
        if isinstance(value, Iterator):  # map, select, unique, reverse...: yield lazily
            value = list(self._paid(value))
            for item in value:
                self.plain(item)
        if isinstance(value, str) and len(value) > self.value_limit:
            raise TemplateBudgetError(
                f"a filter or '~' made a text of {len(value)} characters (the limit is "
                f"{self.value_limit})"
            )
        return self.plain(value)

    def plain(self, value: Any, name: object = None) -> Any:
        """`value` when it is plain data (or undefined, which fails on its own), else
        NotPlainDataError: a method or a loop object prints an address or Python internals."""
        if isinstance(value, _HANDLED):
            return value
        what = type(value).__name__
        named = "a value" if name is None else f"'{printable(str(name))}'"
        raise NotPlainDataError(
            f"{named} is a {what}, not plain data (text, number, boolean, list or mapping)"
        )

    def getattr(self, obj: Any, attribute: str) -> Any:
        return self.plain(super().getattr(obj, attribute), attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        return self.plain(super().getitem(obj, argument), argument)

    def unsafe_undefined(self, obj: Any, attribute: str) -> NoReturn:
        """Refuse an unsafe attribute where it is reached (Jinja would return an undefined
        value that a filter such as `map(attribute=...)` prints as `Undefined`)."""
        raise SecurityError(
            f"access to attribute '{printable(attribute)}' of a {type(obj).__name__} is unsafe"
        )

    def mapping_view(self, mapping: Any, method: str) -> list[Any]:
        """`mapping.items()`, `.values()` or `.keys()` as a list."""
        if not isinstance(mapping, dict):
            raise NotPlainDataError(
                f".{method}() works on a mapping, not on a {type(mapping).__name__}"
            )
        return list(getattr(mapping, method)())

    def loop_items(self, iterable: Iterable[Any]) -> Iterable[Any]:
        """`iterable`, its items paid for from the budget (all at once when it has a length)."""
        try:
            size = len(iterable)  # type: ignore[arg-type]
        except TypeError:
            return self._paid(iter(iterable))
        self._pay(size)
        return iterable

    def _paid(self, items: Iterator[Any]) -> Iterator[Any]:
        for item in items:
            self._pay(1)
            yield item

    def _pay(self, count: int) -> None:
        self.items_left -= count
        if self.items_left < 0:
            raise TemplateBudgetError(f"loops ran over {self.items_budget} items in all")

    def render_bounded(self, name: str, context: dict[str, Any], scale: int = 0) -> str:
        """Render one file with a fresh budget of loop items and output characters."""
        self.items_budget = self.items_left = MAX_LOOP_ITEMS + LOOP_ITEMS_PER_UNIT * scale
        self.value_limit = MAX_VALUE_CHARS + VALUE_CHARS_PER_UNIT * scale
        limit = MAX_OUTPUT_CHARS + OUTPUT_CHARS_PER_UNIT * scale
        out: list[str] = []
        size = 0
        for chunk in self.get_template(name).generate(context):
            size += len(chunk)
            if size > limit:
                raise TemplateBudgetError(f"the output is over {limit} characters")
            out.append(chunk)
        return "".join(out)
