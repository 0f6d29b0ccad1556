"""The template sandbox: what a rendered template may cost, and where templates are read from.

Every template is checked when it is loaded (render/template_check.py: what a template may say)
and compiled once per process (COMPILED, by its text and the environment's options), however
many environments render it. When it runs, a template is in Jinja's immutable sandbox (no
unsafe attribute, no mutation), its loops take at most MAX_LOOP_ITEMS items in all, each text a
filter or `~` makes at most MAX_VALUE_CHARS characters (so a chain of filters cannot grow
without bound), its output at most MAX_OUTPUT_CHARS characters (the three grow with the
cluster), and an include that reaches itself is stopped: a rendered file costs bounded time
and memory.

A template sees plain data only (PLAIN: text, numbers, booleans, None, lists and mappings):
there are no globals (`range`, `cycler`, `lipsum`...), an attribute or item that is anything
else (a method, a loop object, a class) is refused when it is reached, by a filter
(`map(attribute=...)`, `sort(attribute=...)`, `selectattr`) as much as by `.name`, and so is
printing, joining or filtering a special name (`self`, `loop`): nothing non-deterministic,
such as an object's address, reaches a file. An attribute the sandbox finds unsafe is refused
where it is reached, not turned into an undefined value. Templates are read from inside their
folder only: a link that leads out of it (to /etc/passwd, say) is refused, and its content
never shown. A template's name is looked up in each `TemplateRoot` in turn: a folder, and the
first part of the names it serves (a backend's templates: `megatron/core_v0.16/x.j2` is
`parplan_gen/backends/megatron/templates/core_v0.16/x.j2`), or every name.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import CodeType
from typing import Any, NoReturn

import jinja2
from jinja2.loaders import split_template_path
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from parplan_gen.inputs.reading import read_text
from parplan_gen.inputs.safe_text import printable
from parplan_gen.render.template_check import INTERNAL, TemplateRefused, check_template

# Per rendered file, plus as much again per unit of `scale` (render.py: the cluster's nodes,
# so that a hostfile of 131,072 nodes still renders while a runaway loop stops within ~10 ms).
MAX_LOOP_ITEMS, LOOP_ITEMS_PER_UNIT = 20_000, 8
MAX_OUTPUT_CHARS, OUTPUT_CHARS_PER_UNIT = 4 * 1024 * 1024, 512
MAX_VALUE_CHARS, VALUE_CHARS_PER_UNIT = 1024 * 1024, 64
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
_HANDLED = (*PLAIN, jinja2.Undefined)  # an undefined value raises its own error when used


class TemplateBudgetError(Exception):
    """A template ran past a bound while rendering (loop items or output size)."""


class NotPlainDataError(SecurityError):
    """A template reached for something that is not plain data (a method, a loop object)."""


class OutsideFolderError(SecurityError):
    """A template (or mapping.yaml) is a link to a file outside its template folder."""


@dataclass(frozen=True)
class TemplateRoot:
    """A folder of templates and the first part of the names it serves ("": every name)."""

    folder: Path
    prefix: str = ""

    def relative(self, name: str | Path) -> Path | None:
        """Where the template `name` is in this folder; None when the folder does not serve it."""
        parts = Path(name).parts
        if not self.prefix:
            return Path(name)
        if len(parts) > 1 and parts[0] == self.prefix:
            return Path(*parts[1:])
        return None

    def folder_of(self, first: str) -> Path | None:
        """The folder of the names whose first part is `first` (None: this root serves none)."""
        if not self.prefix:
            return self.folder / first
        return self.folder if first == self.prefix else None

    def find(self, name: str | Path) -> Path | None:
        """The template file `name` in this folder (None: not here); OutsideFolderError for a
        link out of it (`file_inside`)."""
        relative = self.relative(name)
        return None if relative is None else file_inside(self.folder, relative)


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
    """Loads from the template roots (first match wins), checking each template first."""

    def __init__(self, roots: list[TemplateRoot]) -> None:
        self.roots = roots

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str, Callable[[], bool]]:
        name = Path(*split_template_path(template))  # refuses '..'
        for index, root in enumerate(self.roots):
            path = root.find(name)
            if path is not None:
                earlier = [
                    r.folder / relative
                    for r in self.roots[:index]
                    if (relative := r.relative(name)) is not None
                ]
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

    def __init__(self, roots: list[TemplateRoot], **options: Any) -> None:
        super().__init__(loader=_CheckedLoader(roots), **options)
        self.globals.clear()  # range, cycler, joiner, lipsum, namespace, dict: not data
        for method in (self.loop_items, self.measured, self.plain, self.mapping_view):
            self.filters[INTERNAL + method.__name__] = method
        self.items_budget = self.items_left = MAX_LOOP_ITEMS
        self.value_limit = MAX_VALUE_CHARS

    def template_file(self, name: str) -> str | None:
        """The file the template `name` is read from (None: no root has it)."""
        loader = self.loader
        assert isinstance(loader, _CheckedLoader)
        try:
            return next((str(p) for r in loader.roots if (p := r.find(name)) is not None), None)
        except (OutsideFolderError, ValueError):
            return None

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
