"""`parplan rules check`: every problem of a set of rule directories, not just the first.

The check loads the rules exactly as every command does (`ruleset.load_rules`), with a `Checker`
as its collector: each file, rule, named formula and formula is tried on its own, its error
kept, and loading goes on with what is valid. So that one mistake is reported once, a file with
schema errors goes on without the entries at fault (positions still point into the file), and a
named formula with an error is left out together with every formula that uses it. Named formulas
that no rule uses are warnings.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from parplan_gen.inputs.errors import FormulaError, InputError, ParplanError, RuleError, SourceRef
from parplan_gen.inputs.key_path import KeyPath
from parplan_gen.inputs.resources import builtin_rule_files
from parplan_gen.inputs.source import Document, load_document
from parplan_gen.inputs.validation import all_errors
from parplan_gen.rules.formula_runtime import Expect, Formula
from parplan_gen.rules.formula_translate import MAX_TEXT
from parplan_gen.rules.formulas import FormulaLibrary, TextTemplate
from parplan_gen.rules.request_names import READ_BY_CODE
from parplan_gen.rules.ruleset import MAX_RULE_FILE_BYTES, RuleSet, load_rule_file, load_rules
from parplan_gen.rules.schema import RuleFile, Value

T = TypeVar("T")
_STAND_IN: dict[str | None, Value] = {"number": 0, "bool": True, "str": "''", None: 0}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Problem:
    """One finding, printed as `file:line:col: [warning: ][key.path: ]message`."""

    where: SourceRef | None
    message: str
    warning: bool = False

    def render(self) -> str:
        if self.warning:
            return f"{self.where}: warning: {self.message}" if self.where else self.message
        return ParplanError(self.message, self.where).render()


@dataclass(frozen=True)
class RuleCheckReport:
    """What `check_rules` found, in file order, and the rules it could load."""

    problems: tuple[Problem, ...]
    files: tuple[str, ...]  # the rule files of the directories checked
    scope: str  # "the built-in rules" or the directories checked
    rules: RuleSet

    @property
    def errors(self) -> int:
        return sum(not p.warning for p in self.problems)

    @property
    def warnings(self) -> int:
        return sum(p.warning for p in self.problems)

    def summary(self) -> str:
        """One line: `checked 2 rule files in DIR: 3 errors, 1 warning`."""
        found = [_count(self.errors, "error") if self.errors else "no errors"]
        found += [_count(self.warnings, "warning")] if self.warnings else []
        verdict = "no problems" if not self.problems else ", ".join(found)
        return f"checked {_count(len(self.files), 'rule file')} in {self.scope}: {verdict}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def check_rules(dirs: Sequence[str | Path] = ()) -> RuleCheckReport:
    """Check `dirs` layered over the built-in rules (or the built-in rules alone)."""
    checker = Checker()
    rules = load_rules(dirs, collect=checker)
    scope = [Path(d) for d in dirs]
    builtin = {str(p) for p in builtin_rule_files()} if not dirs else set()

    def in_scope(file: str) -> bool:
        return file in builtin or any(Path(file).is_relative_to(d) for d in scope)

    unused = [
        Problem(checker.named[n][1], f"named formula '{n}' is not used by any rule", True)
        for n in checker.unused()
        if in_scope(checker.named[n][1].file)
    ]
    errors = [Problem(e.where, e.message) for e in checker.errors]
    rank = {file: i for i, file in enumerate(checker.files)}

    def order(p: Problem) -> tuple[int, int, int]:
        where = p.where or SourceRef("")
        return rank.get(where.file, -1), where.line or 0, where.column or 0

    return RuleCheckReport(
        problems=tuple(sorted(errors + unused, key=order)),
        files=tuple(f for f in checker.files if in_scope(f)),
        scope=", ".join(str(d) for d in dirs) or "the built-in rules",
        rules=rules,
    )


class Checker:
    """The collector `load_rules` reports to (see `layers.Collector`)."""

    def __init__(self) -> None:
        self.errors: list[ParplanError] = []
        self.files: list[str] = []
        self.named: dict[str, tuple[Value, SourceRef]] = {}
        self.broken: set[str] = set()  # named formulas left out for an error
        self.texts: list[Value] = []  # every rule formula compiled

    def attempt(self, step: Callable[[], T]) -> T | None:
        try:
            return step()
        except InputError as exc:
            self.errors.append(exc)
            return None

    def load_file(self, path: Path) -> tuple[Document, RuleFile] | None:
        self.files.append(str(path))
        try:
            return load_rule_file(path)
        except RuleError as first:  # the schema: find every entry at fault
            return self._without_invalid(path, first)
        except InputError as exc:  # unreadable or malformed: nothing else to check in it
            self.errors.append(exc)
            return None

    def _without_invalid(self, path: Path, first: RuleError) -> tuple[Document, RuleFile] | None:
        doc = load_document(path, max_bytes=MAX_RULE_FILE_BYTES)
        data = {} if doc.data is None else doc.data
        try:
            if not isinstance(data, dict):
                raise first
            return doc, RuleFile.model_validate(data)
        except ValidationError as exc:
            found = all_errors(exc, RuleFile, data, doc, error=RuleError)
        except RuleError:
            found = [((), first)]
        self.errors += [error for _, error in found]
        drop = {_entry(key_path) for key_path, _ in found}
        if () in drop:
            return None
        kept = {
            section: [i for i in range(len(items)) if (section, i) not in drop]
            for section, items in data.items()
            if isinstance(items, list)
        }
        pruned = _PrunedDocument(doc, _without(data, drop, ()), kept)
        try:
            return pruned, RuleFile.model_validate(pruned.data)
        except ValidationError:  # not expected: what is left was valid; reported already
            return None

    def library(self, named: Mapping[str, tuple[Value, SourceRef]]) -> FormulaLibrary:
        """The named formulas without those that fail, and without every one that uses them."""
        self.named = dict(named)
        remaining = dict(named)
        while True:
            try:
                return _CheckingLibrary(remaining, self)
            except FormulaError as exc:
                self.errors.append(exc)
                culprits = [n for n, (_, where) in remaining.items() if where == exc.where]
                left_out = _users(set(culprits[:1] or remaining), remaining)
                self.broken |= left_out
                remaining = {n: v for n, v in remaining.items() if n not in left_out}

    def formula_failed(self, exc: FormulaError, value: Value) -> None:
        """Keep `exc` unless the formula uses a named formula already reported as broken."""
        if not _identifiers(value) & self.broken:
            self.errors.append(exc)

    def unused(self) -> list[str]:
        """Named formulas that no rule uses, directly or through other named formulas."""
        used: set[str] = set()
        found = set().union(*map(_identifiers, self.texts), READ_BY_CODE) & self.named.keys()
        while found:
            used |= found
            found = set().union(*(_identifiers(self.named[n][0]) for n in found))
            found = (found & self.named.keys()) - used
        return [n for n in self.named if n not in used and n not in self.broken]


class _CheckingLibrary(FormulaLibrary):
    """Compiles like FormulaLibrary; a formula that fails is reported and replaced by a stand-in."""

    def __init__(self, named: Mapping[str, tuple[Value, SourceRef]], checker: Checker) -> None:
        self._checker = checker
        super().__init__(named)

    def compile(
        self,
        value: Value,
        where: SourceRef,
        context: str,
        expect: Expect | None = None,
        models: tuple[str, ...] | None = None,
    ) -> Formula:
        self._checker.texts.append(value)
        try:
            return super().compile(value, where, context, expect, models)
        except FormulaError as exc:
            self._checker.formula_failed(exc, value)
            return super().compile(_STAND_IN[expect], where, context, expect)

    def compile_text(
        self, text: str, where: SourceRef, context: str, models: tuple[str, ...] | None = None
    ) -> TextTemplate:
        try:  # each placeholder goes through compile() above; this catches the text's own errors
            return super().compile_text(text, where, context, models)
        except FormulaError as exc:
            self._checker.errors.append(exc)
            return super().compile_text("", where, context)


class _PrunedDocument(Document):
    """A rule file without its invalid entries; positions still point into the original text."""

    def __init__(self, doc: Document, data: Any, kept: dict[str, list[int]]) -> None:
        super().__init__(doc.name, doc.text, data)
        self._kept = kept  # section -> the original index of each item kept

    def ref(self, path: KeyPath = ()) -> SourceRef:
        if len(path) >= 2 and isinstance(path[1], int) and str(path[0]) in self._kept:
            path = (path[0], self._kept[str(path[0])][path[1]], *path[2:])
        return super().ref(path)


def _entry(key_path: KeyPath) -> KeyPath:
    """The entry that holds a schema error: a rule, a named formula, an estimate figure."""
    return key_path[:3] if key_path[:1] == ("estimate",) else key_path[:2]


def _without(value: Any, drop: set[KeyPath], path: KeyPath) -> Any:
    if isinstance(value, dict):
        return {
            k: _without(v, drop, (*path, k)) for k, v in value.items() if (*path, k) not in drop
        }
    if isinstance(value, list):
        return [
            _without(v, drop, (*path, i)) for i, v in enumerate(value) if (*path, i) not in drop
        ]
    return value


def _identifiers(value: Value) -> set[str]:
    """The plain names a formula mentions (a superset where it does not parse)."""
    if not isinstance(value, str):
        return set()
    if len(value) <= MAX_TEXT:
        try:
            tree = ast.parse(value.strip(), mode="eval")
            return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            pass
    return set(_IDENT.findall(value))


def _users(names: set[str], named: Mapping[str, tuple[Value, SourceRef]]) -> set[str]:
    """`names` and every named formula that uses one of them, directly or not."""
    found = set(names)
    grew = True
    while grew:
        more = {n for n, (v, _) in named.items() if n not in found and _identifiers(v) & found}
        found |= more
        grew = bool(more)
    return found
