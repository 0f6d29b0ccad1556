"""Load rule directories into one compiled RuleSet.

Layers: the built-in `rules/` first, then each `--rules DIR` in order. Within a layer every rule
id and named formula is defined once; a later layer replaces a rule with the same id (in the
place the original had) or adds new ones, may redefine a named formula or one estimate figure,
and may switch rules of earlier layers off (`disable: [ids]`); `layers` merges them. Owns the
compiled rule types (`RuleSet`, `Compiled*`), reading the rule files and compiling every
formula, here, once; the engine only evaluates them.

Loading stops at the first error, unless a `Collector` is given (`parplan rules check`): then
each file, rule and formula is tried on its own and every problem goes to the collector.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path

from parplan_gen.inputs.defaults import MIB
from parplan_gen.inputs.errors import RuleError, SourceRef
from parplan_gen.inputs.resources import builtin_rule_files
from parplan_gen.inputs.safe_text import printable
from parplan_gen.inputs.source import Document, load_document
from parplan_gen.inputs.validation import validate
from parplan_gen.models.graph_node import canonical_op
from parplan_gen.models.kind import MODEL_KINDS, ModelKind
from parplan_gen.rules import vocabulary
from parplan_gen.rules.file_uses import check_uses
from parplan_gen.rules.formula_runtime import Expect, Formula, Value
from parplan_gen.rules.formulas import FormulaLibrary, TextTemplate
from parplan_gen.rules.layers import (
    Collector,
    Entry,
    Merged,
    Override,
    RuleOrigin,
    attempt,
    figure_label,
    merge_layer,
)
from parplan_gen.rules.schema import (
    ConstraintRule,
    NamedFormula,
    OpportunityRule,
    ProposalRule,
    RuleFile,
)

BUILTIN_LAYER = "built-in"
# A rule file is written by hand: the built-in ones together are under 100 KB. Each rule is
# validated and its formulas compiled, ~1 ms per rule: 1 MiB of rules loads in seconds.
MAX_RULE_FILE_BYTES = MIB
# The rule files of one layer (a directory, recursively): the built-in rules are 18 files, an
# overlay a handful. Each file costs its parse and, kept, its rules (~20 KB per rule compiled),
# so 1,000 one-rule files load in under a second and ~20 MB; a folder of 20,000 is refused
# by name instead of being read for seconds into hundreds of MB.
MAX_RULE_FILES = 1000
SETTING_KEY = r"^[a-z][a-z0-9_]*$"


@dataclass(frozen=True)
class CompiledOpportunity:
    """An opportunity rule with every field compiled."""

    rule: OpportunityRule
    origin: RuleOrigin
    op: str | None  # canonical op, "*" or None for graph rules
    when: Formula
    min_devices: Formula
    memory_per_device: Formula
    communication_overhead: Formula
    speedup: Formula


@dataclass(frozen=True)
class CompiledProposal:
    """A proposal rule with every field compiled."""

    rule: ProposalRule
    origin: RuleOrigin
    when: Formula
    speedup: Formula
    settings: dict[str, Formula]
    description: TextTemplate


@dataclass(frozen=True)
class CompiledConstraint:
    """A constraint rule with its condition, requirement and reason compiled."""

    rule: ConstraintRule
    origin: RuleOrigin
    when: Formula
    require: Formula
    reason: TextTemplate
    model_kinds: tuple[ModelKind, ...] = MODEL_KINDS  # the kinds of model it applies to


@dataclass(frozen=True)
class EstimateFormula:
    """One figure of the cost model (e.g. memory.params) and the formula that gives it."""

    section: str  # "memory" | "time" | "throughput"
    key: str
    formula: Formula
    origin: RuleOrigin
    model_kind: ModelKind = "transformer"  # the kind of model this cost model is for

    @property
    def label(self) -> str:
        """`estimate.memory.params`, with the model kind when it is not a transformer."""
        return figure_label((self.model_kind, self.section, self.key))


@dataclass(frozen=True)
class RuleSet:
    """Everything the engine needs: compiled rules in order, and where each came from."""

    library: FormulaLibrary
    opportunities: tuple[CompiledOpportunity, ...]
    proposals: tuple[CompiledProposal, ...]
    layers: tuple[str, ...]
    overrides: tuple[Override, ...] = field(default=())
    constraints: tuple[CompiledConstraint, ...] = field(default=())
    estimate: tuple[EstimateFormula, ...] = field(default=())
    # Each named formula in force: its unit and source as written (NamedFormula), and where.
    formula_notes: Mapping[str, tuple[NamedFormula, RuleOrigin]] = field(
        default_factory=dict, compare=False
    )


def load_rules(
    extra_dirs: Sequence[str | Path] = (),
    *,
    builtin: bool = True,
    collect: Collector | None = None,
) -> RuleSet:
    """Load the built-in rules (unless `builtin` is False) and layer `extra_dirs` over them.

    With `collect`, problems go to it and the result holds the rules that are valid. The
    built-in rules alone are compiled once for each content of their files and that RuleSet is
    shared (a RuleSet is never changed once loaded): a process that plans, checks or estimates
    many times, as the API's users and the tests do, compiles them once."""
    if builtin and not extra_dirs and collect is None:
        contents = _contents(builtin_rule_files())
        if contents is not None:
            return _builtin_alone(contents)
    return _load(extra_dirs, builtin, collect)


def _contents(paths: list[Path]) -> tuple[tuple[str, bytes], ...] | None:
    """Each file's path and bytes; None when one cannot be read (loading it says why)."""
    try:
        return tuple((str(path), path.read_bytes()) for path in paths)
    except OSError:
        return None


@lru_cache(maxsize=1)
def _builtin_alone(contents: tuple[tuple[str, bytes], ...]) -> RuleSet:
    """The built-in rules alone, loaded while their files hold `contents` (the cache's key: a
    file that changes is loaded anew)."""
    return _load((), True, None)


def _load(extra_dirs: Sequence[str | Path], builtin: bool, collect: Collector | None) -> RuleSet:
    # Each layer's rule files: the built-in ones (rules/ and each backend's constraints.yaml,
    # inputs/resources.py), then each directory's.
    layers: list[tuple[str, Callable[[], list[tuple[Document, RuleFile]]]]] = (
        [(BUILTIN_LAYER, partial(_builtin_layer, collect))] if builtin else []
    )
    layers += [
        (str(d), partial(_load_layer, partial(rule_files, Path(d)), collect)) for d in extra_dirs
    ]
    merged = Merged()
    for layer, files in layers:
        merge_layer(merged, layer, files(), collect)
    return _compile(merged, tuple(name for name, _ in layers), collect)


def _builtin_layer(collect: Collector | None) -> list[tuple[Document, RuleFile]]:
    """The built-in rule files, parsed: once for each content of the files when nothing
    collects problems (merging only reads them)."""
    if collect is None:
        contents = _contents(builtin_rule_files())
        if contents is not None:
            return list(_parsed_builtin(contents))
    return _load_layer(builtin_rule_files, collect)


@lru_cache(maxsize=1)
def _parsed_builtin(
    contents: tuple[tuple[str, bytes], ...],
) -> tuple[tuple[Document, RuleFile], ...]:
    """The built-in rule files parsed while they hold `contents` (the cache's key)."""
    return tuple(_load_layer(builtin_rule_files, None))


def _load_layer(
    files: Callable[[], list[Path]], collect: Collector | None
) -> list[tuple[Document, RuleFile]]:
    paths = files() if collect is None else collect.attempt(files)
    loaded = []
    for path in paths or []:
        loaded.append(load_rule_file(path) if collect is None else collect.load_file(path))
        # Parsing a YAML file leaves a few hundred objects in reference cycles (ruamel makes a
        # loader class per parse), which only the cyclic collector frees; the CLI pauses it for
        # the whole run (cli/main.py), where 20,000 rule files kept 1.4 GB of them. Collecting
        # the youngest generation frees each file's cycles for ~0.1 ms.
        gc.collect(0)
    return [file for file in loaded if file is not None]


def rule_files(directory: Path) -> list[Path]:
    """The rule files of a directory, recursively, in a stable (sorted) order. A rule file is
    read and an error may quote it, so a link (to a file or a folder) that leads out of the
    directory is refused; links to folders are not followed."""
    if not directory.is_dir():
        raise RuleError("rules directory not found", SourceRef(str(directory)))
    root = directory.resolve()
    found, links = [], []
    for path in directory.rglob("*"):
        if path.is_symlink():
            links.append(path)
        if path.suffix in (".yaml", ".yml") and not path.is_dir():
            found.append(path)
            if len(found) > MAX_RULE_FILES:
                raise RuleError(
                    f"more than {MAX_RULE_FILES:,} rule files (.yaml, .yml) in this rules "
                    "directory; merge them into fewer files",
                    SourceRef(str(directory)),
                )
    for link in sorted(links):  # sorted: the first bad link is always the same
        _check_inside(link, root, directory)
    return sorted(found, key=lambda p: p.relative_to(directory).as_posix())


def _check_inside(link: Path, root: Path, directory: Path) -> None:
    """Refuse a link whose target (every link on the way followed) is outside `root`."""
    try:
        inside = link.resolve().is_relative_to(root)
    except (OSError, RuntimeError):  # a loop of links
        raise RuleError("a link that cannot be followed (a loop?)", SourceRef(str(link))) from None
    if not inside:
        message = f"a link out of the rules directory {directory}; rule files must be inside it"
        raise RuleError(message, SourceRef(str(link)))


def load_rule_file(path: Path) -> tuple[Document, RuleFile]:
    """Parse and validate one rule file."""
    doc = load_document(path, max_bytes=MAX_RULE_FILE_BYTES)
    data = {} if doc.data is None else doc.data
    if not isinstance(data, dict):
        raise RuleError(
            "a rule file must be a mapping (formulas, opportunities, proposals)", doc.ref(())
        )
    return doc, validate(RuleFile, data, doc, error=RuleError)


def _compile(merged: Merged, layers: tuple[str, ...], collect: Collector | None = None) -> RuleSet:
    named = {n: (v, o.where) for n, (v, o) in merged.formulas.items()}
    library = _library(named) if collect is None else collect.library(named)
    opportunities: list[CompiledOpportunity] = []
    proposals: list[CompiledProposal] = []
    constraints: list[CompiledConstraint] = []
    for entry in merged.rules.values():
        if entry.kind == "opportunity":
            opportunity = attempt(collect, partial(_compile_opportunity, library, entry))
            opportunities += [opportunity] if opportunity else []
        elif entry.kind == "proposal":
            proposal = attempt(collect, partial(_compile_proposal, library, entry))
            proposals += [proposal] if proposal else []
        else:
            constraint = attempt(collect, partial(_compile_constraint, library, entry))
            constraints += [constraint] if constraint else []
    estimate = tuple(
        EstimateFormula(
            section, key, library.compile(value, o.where, "estimate", "number", (kind,)), o, kind
        )
        for (kind, section, key), (value, o) in merged.estimate.items()
    )
    rules = RuleSet(
        library,
        tuple(opportunities),
        tuple(_in_group_order(proposals)),
        layers,
        tuple(merged.overrides),
        tuple(constraints),
        estimate,
        {n: (merged.notes[n], o) for n, (_, o) in merged.formulas.items()},
    )
    # once per load: the files' `uses:` lists
    check_uses(merged, library, (*opportunities, *proposals, *constraints, *estimate), collect)
    return rules


# The libraries of the last named-formula sets compiled (the built-in rules' and an overlay's):
# an overlay that leaves the named formulas as they are shares the built-in rules' library, and
# the formulas it compiled, instead of compiling ~300 named formulas again.
_LIBRARIES: dict[tuple[object, ...], tuple[FormulaLibrary, tuple[SourceRef, ...]]] = {}
LIBRARIES_KEPT = 2


def _library(named: Mapping[str, tuple[Value, SourceRef]]) -> FormulaLibrary:
    """The library of `named`: the one compiled before for the same values at the same places
    (file, key path and parse: SourceRef.same_place), else a new one."""
    wheres = tuple(where for _, where in named.values())
    key = tuple(
        (n, type(v).__name__, v, w.file, w.path, id(w.document)) for n, (v, w) in named.items()
    )
    kept = _LIBRARIES.get(key)
    if kept is not None and all(a.same_place(b) for a, b in zip(kept[1], wheres, strict=True)):
        _LIBRARIES[key] = _LIBRARIES.pop(key)  # the most recently used is kept longest
        return kept[0]
    library = FormulaLibrary(named)
    while len(_LIBRARIES) >= LIBRARIES_KEPT:
        del _LIBRARIES[next(iter(_LIBRARIES))]
    _LIBRARIES[key] = (library, wheres)
    return library


def _compile_constraint(library: FormulaLibrary, entry: Entry) -> CompiledConstraint:
    rule = entry.rule
    assert isinstance(rule, ConstraintRule)

    def ref(key: str) -> SourceRef:
        return entry.doc.ref((*entry.path, key))

    given: tuple[ModelKind, ...] | None
    if rule.model_kind is None:
        given = None
    elif rule.model_kind == "any":
        given = MODEL_KINDS
    else:
        given = (rule.model_kind,)
    when = library.compile(rule.when, ref("when"), "constraint", "bool", given)
    require = library.compile(rule.require, ref("require"), "constraint", "bool", given)
    reason = library.compile_text(rule.reason, ref("reason"), "constraint", given)
    kinds = given or _kinds_with_values(
        rule.id, when.names | require.names | reason.names, ref("require")
    )
    return CompiledConstraint(rule, entry.origin, when, require, reason, kinds)


def _kinds_with_values(
    rule_id: str, names: frozenset[str], where: SourceRef
) -> tuple[ModelKind, ...]:
    """For a constraint that does not say its `model_kind`: the kinds of model that give every
    name it reads a value (every kind when it reads no model.* name)."""
    models = {n: entry.models for n in sorted(names) if (entry := vocabulary.lookup(n))}
    kinds = tuple(k for k in MODEL_KINDS if all(k in m for m in models.values()))
    if not kinds:
        by_kind = {k: next(n for n, m in models.items() if m == (k,)) for k in MODEL_KINDS}
        raise RuleError(
            f"constraint '{rule_id}' reads names of transformer models ({by_kind['transformer']}) "
            f"and of graph models ({by_kind['graph']}): no model has both; split it in two",
            where,
        )
    return kinds


def _compile_opportunity(library: FormulaLibrary, entry: Entry) -> CompiledOpportunity:
    rule = entry.rule
    assert isinstance(rule, OpportunityRule)
    context = rule.scope

    def field_formula(name: str, expect: Expect) -> Formula:
        where = entry.doc.ref((*entry.path, name))
        return library.compile(getattr(rule, name), where, context, expect)

    op = None if rule.op is None else ("*" if rule.op == "*" else canonical_op(rule.op))
    return CompiledOpportunity(
        rule=rule,
        origin=entry.origin,
        op=op,
        when=field_formula("when", "bool"),
        min_devices=field_formula("min_devices", "number"),
        memory_per_device=field_formula("memory_per_device", "number"),
        communication_overhead=field_formula("communication_overhead", "number"),
        speedup=field_formula("speedup", "number"),
    )


def _compile_proposal(library: FormulaLibrary, entry: Entry) -> CompiledProposal:
    rule = entry.rule
    assert isinstance(rule, ProposalRule)

    def ref(*keys: str) -> SourceRef:
        return entry.doc.ref((*entry.path, *keys))

    settings: dict[str, Formula] = {}
    for key, value in rule.settings.items():
        if not re.match(SETTING_KEY, key):
            message = f"setting name '{printable(key)}' must match {SETTING_KEY}"
            raise RuleError(message, ref("settings", key))
        settings[key] = library.compile(value, ref("settings", key), "proposal")
    return CompiledProposal(
        rule=rule,
        origin=entry.origin,
        when=library.compile(rule.when, ref("when"), "proposal", "bool"),
        speedup=library.compile(rule.speedup, ref("speedup"), "proposal", "number"),
        settings=settings,
        description=library.compile_text(
            rule.description, ref("description"), "proposal_description"
        ),
    )


def _in_group_order(proposals: list[CompiledProposal]) -> list[CompiledProposal]:
    """Groups in order of first appearance; rules keep their order inside a group."""
    order: dict[str, int] = {}
    for p in proposals:
        order.setdefault(p.rule.group, len(order))
    return sorted(proposals, key=lambda p: order[p.rule.group])
