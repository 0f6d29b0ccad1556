"""Rule layers: the built-in rules, then each `--rules DIR`, merged into one set of rules before
they are compiled. Owns where a rule came from (`RuleOrigin`), the merge of one layer over the
earlier ones (a rule replaced by id in its place, a named formula or an estimate figure
redefined with the unit it had, rules switched off by `disable:`, duplicates within a layer
refused), the record of what was overridden (`Override`), each file's name and `uses:` list
(`FileEntry`, the list checked against the layer's files), and the `Collector` protocol through
which `parplan rules check` receives every problem instead of the first.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path, PurePosixPath
from typing import Any, Protocol, TypeVar

from parplan_gen.inputs.errors import MAX_HINT_CHARS, RuleError, SourceRef
from parplan_gen.inputs.resources import builtin_display_name
from parplan_gen.inputs.safe_text import printable
from parplan_gen.inputs.source import Document
from parplan_gen.models.kind import ModelKind
from parplan_gen.rules.formulas import FormulaLibrary
from parplan_gen.rules.schema import (
    ConstraintRule,
    NamedFormula,
    OpportunityRule,
    ProposalRule,
    RuleFile,
    Value,
)

T = TypeVar("T")
AnyRule = OpportunityRule | ProposalRule | ConstraintRule
# An estimate figure: (model kind, section, key).
Figure = tuple[ModelKind, str, str]


@dataclass(frozen=True)
class RuleOrigin:
    """Where a rule was defined: its file position and the layer it came from."""

    where: SourceRef
    layer: str


def figure_label(figure: tuple[str, str, str]) -> str:
    """How an estimate figure (model kind, section, key) is named in messages."""
    kind, section, key = figure
    name = f"estimate.{section}.{key}"
    return name if kind == "transformer" else f"{name} ({kind} models)"


@dataclass(frozen=True)
class Override:
    """A rule or named formula of one layer replaced (or, `disabled`, switched off) by a later
    layer; `by` is the replacement or the `disable` entry."""

    id: str
    replaced: RuleOrigin
    by: RuleOrigin
    disabled: bool = False


class Collector(Protocol):
    """Receives problems instead of loading stopping at the first (see `rules_check`)."""

    def attempt(self, step: Callable[[], T]) -> T | None:
        """`step()`, or None when it raised an input error (which the collector keeps)."""

    def load_file(self, path: Path) -> tuple[Document, RuleFile] | None:
        """The file with its invalid entries left out, or None when nothing of it is usable."""

    def library(self, named: Mapping[str, tuple[Value, SourceRef]]) -> FormulaLibrary:
        """A library of the valid named formulas whose compile() collects instead of raising."""


@dataclass
class Entry:
    """One rule as read: its kind and section, the file and key path it sits at."""

    kind: str  # "opportunity" | "proposal" | "constraint"
    section: str  # "opportunities" | "proposals" | "constraints"
    rule: AnyRule
    doc: Document
    path: tuple[str | int, ...]
    origin: RuleOrigin


@dataclass(frozen=True)
class FileEntry:
    """One rule file of a layer: its name in `uses:` lists (`cost/memory`) and what it uses."""

    layer: str
    name: str
    uses: tuple[str, ...]
    doc: Document


@dataclass
class Merged:
    """The layers merged so far: rules by id, named formulas (with their unit and source, and
    every layer's definition), estimate figures, overrides, and the files by their path."""

    rules: dict[str, Entry] = field(default_factory=dict)
    formulas: dict[str, tuple[Any, RuleOrigin]] = field(default_factory=dict)
    overrides: list[Override] = field(default_factory=list)
    estimate: dict[Figure, tuple[Any, RuleOrigin]] = field(default_factory=dict)
    notes: dict[str, NamedFormula] = field(default_factory=dict)
    definitions: dict[str, list[RuleOrigin]] = field(default_factory=dict)
    files: dict[tuple[str, str], FileEntry] = field(default_factory=dict)  # by layer and path
    layers: list[str] = field(default_factory=list)


def attempt(collect: Collector | None, step: Callable[[], T]) -> T | None:
    return step() if collect is None else collect.attempt(step)


def file_name(path: Path, layer: str) -> str:
    """How `uses:` lists name a rule file: its path under its layer's directory (`--rules DIR`
    is the layer `DIR`) without the suffix, a built-in one as it is shown without
    `<built-in>/` (`cost/memory`, `backends/megatron/constraints`)."""
    shown = builtin_display_name(path)
    if shown is not None:
        return PurePosixPath(shown.split("/", 1)[1]).with_suffix("").as_posix()
    root = Path(layer)
    inside = path.relative_to(root) if path.is_relative_to(root) else path
    return inside.with_suffix("").as_posix()


def merge_layer(
    merged: Merged,
    layer: str,
    files: list[tuple[Document, RuleFile]],
    collect: Collector | None = None,
) -> None:
    """Merge the rule `files` of `layer` over the earlier layers'."""
    seen_rules: dict[str, RuleOrigin] = {}
    seen_formulas: dict[str, RuleOrigin] = {}
    disables: list[tuple[str, RuleOrigin]] = []
    merged.layers.append(layer)
    entries = [FileEntry(layer, file_name(Path(d.name), layer), tuple(f.uses), d) for d, f in files]
    merged.files |= {(layer, file.doc.name): file for file in entries}
    for file in entries:
        for index, used in enumerate(file.uses):
            attempt(collect, partial(_check_use, file, index, used, entries))
    for doc, parsed in files:
        for name, value in parsed.formulas.items():
            origin = RuleOrigin(doc.ref(("formulas", name)), layer)
            attempt(collect, partial(_merge_formula, merged, seen_formulas, name, value, origin))
        sections: tuple[tuple[str, str, Sequence[AnyRule]], ...] = (
            ("opportunity", "opportunities", parsed.opportunities),
            ("proposal", "proposals", parsed.proposals),
            ("constraint", "constraints", parsed.constraints),
        )
        for kind, section, rules in sections:
            for index, rule in enumerate(rules):
                path = (section, index)
                entry = Entry(kind, section, rule, doc, path, RuleOrigin(doc.ref(path), layer))
                attempt(collect, partial(_merge_rule, merged, seen_rules, entry))
        _merge_estimate(merged, layer, doc, parsed, seen_formulas, collect)
        disables += [
            (rule_id, RuleOrigin(doc.ref(("disable", i)), layer))
            for i, rule_id in enumerate(parsed.disable)
        ]
    for rule_id, origin in disables:  # after the whole layer, so file order does not matter
        attempt(collect, partial(_disable, merged, rule_id, origin))


def _check_use(entry: FileEntry, index: int, used: str, layer: list[FileEntry]) -> None:
    """`uses[index]` of `entry` names another file of its layer, once."""
    names = [other.name for other in layer]
    where = entry.doc.ref(("uses", index))
    if used == entry.name:
        raise RuleError(f"'{printable(used)}' is this file; list only the others it reads", where)
    if used not in names:
        close = len(used) <= MAX_HINT_CHARS
        hint = difflib.get_close_matches(used, names, n=1) if close else []
        raise RuleError(
            f"no rule file '{printable(used)}' in this layer"
            + (f" (did you mean '{hint[0]}'?)" if hint else "")
            + "; a file is named by its path under its rules directory, without .yaml",
            where,
        )
    if used in entry.uses[:index]:
        raise RuleError(f"'{printable(used)}' is listed twice", where)


def _merge_formula(
    merged: Merged, seen: dict[str, RuleOrigin], name: str, value: Any, origin: RuleOrigin
) -> None:
    """A named formula, as a formula or as {value, unit, source}: a redefinition replaces the
    value and the source and keeps the unit, which it may not change."""
    _refuse_duplicate(seen, name, origin, "named formula")
    note = value if isinstance(value, NamedFormula) else NamedFormula.model_construct(value=value)
    old = merged.notes.get(name)
    if old is not None and old.unit is not None:
        if note.unit is not None and note.unit != old.unit:
            raise RuleError(
                f"named formula '{printable(name)}' is in {old.unit} (at "
                f"{merged.formulas[name][1].where}), not {note.unit}: a redefinition keeps the "
                "unit",
                origin.where,
            )
        note = note.model_copy(update={"unit": old.unit})
    if name in merged.formulas:
        merged.overrides.append(Override(name, merged.formulas[name][1], origin))
    merged.formulas[name] = (note.value, origin)
    merged.notes[name] = note
    merged.definitions.setdefault(name, []).append(origin)


def _merge_rule(merged: Merged, seen: dict[str, RuleOrigin], entry: Entry) -> None:
    rule_id, origin = entry.rule.id, entry.origin
    _refuse_duplicate(seen, rule_id, origin, "rule id")
    old = merged.rules.get(rule_id)
    if old is not None and old.kind != entry.kind:
        raise RuleError(
            f"rule '{rule_id}' is under `{entry.section}` here but under `{old.section}` at "
            f"{old.origin.where}; an override must keep the kind",
            origin.where,
        )
    if old is not None:
        merged.overrides.append(Override(rule_id, old.origin, origin))
    merged.rules[rule_id] = entry


def _disable(merged: Merged, rule_id: str, origin: RuleOrigin) -> None:
    """Switch off the rule `rule_id` of an earlier layer."""
    entry = merged.rules.get(rule_id)
    shown = printable(rule_id)
    if entry is not None and entry.origin.layer == origin.layer:
        raise RuleError(
            f"cannot disable rule '{shown}': it is defined in this same layer at "
            f"{entry.origin.where}; delete it there instead",
            origin.where,
        )
    if entry is None:
        earlier = [o for o in merged.overrides if o.disabled and o.id == rule_id]
        if earlier:
            reason = f"it is already disabled at {earlier[-1].by.where}"
        elif rule_id in merged.formulas:
            reason = "it is a named formula (redefine it instead)"
        else:  # a long id is no misspelling, and difflib's time grows with its length
            close = len(rule_id) <= MAX_HINT_CHARS
            hint = difflib.get_close_matches(rule_id, list(merged.rules), n=1) if close else []
            reason = "no earlier layer defines it" + (
                f" (did you mean '{hint[0]}'?)" if hint else ""
            )
        raise RuleError(f"cannot disable rule '{shown}': {reason}", origin.where)
    del merged.rules[rule_id]
    merged.overrides.append(Override(rule_id, entry.origin, origin, disabled=True))


def _merge_estimate(
    merged: Merged,
    layer: str,
    doc: Document,
    parsed: RuleFile,
    seen: dict[str, RuleOrigin],
    collect: Collector | None = None,
) -> None:
    """Estimate figures merge key by key: a later layer may replace one figure."""
    if parsed.estimate is None:
        return
    kind = parsed.estimate.model_kind
    for section in ("memory", "time", "throughput"):
        for key, value in getattr(parsed.estimate, section).items():
            origin = RuleOrigin(doc.ref(("estimate", section, key)), layer)
            figure = (kind, section, key)
            attempt(collect, partial(_merge_figure, merged, seen, figure, value, origin))


def _merge_figure(
    merged: Merged,
    seen: dict[str, RuleOrigin],
    figure: Figure,
    value: Any,
    origin: RuleOrigin,
) -> None:
    name = figure_label(figure)
    _refuse_duplicate(seen, name, origin, "estimate figure")
    old = merged.estimate.get(figure)
    if old is not None:
        merged.overrides.append(Override(name, old[1], origin))
    merged.estimate[figure] = (value, origin)


def _refuse_duplicate(seen: dict[str, RuleOrigin], key: str, origin: RuleOrigin, what: str) -> None:
    if key in seen:
        raise RuleError(
            f"duplicate {what} '{printable(key)}' (first defined at {seen[key].where})",
            origin.where,
        )
    seen[key] = origin
