"""Which rule files a rule file reads: a file that uses a named formula another file of its
layer defines lists that file in `uses:` (`uses: [cost/memory]`), so the dependencies between
the files of a layer are written down where they are made, and loading refuses one that is not.

A named formula that an earlier layer defines is free to use anywhere (an overlay builds on the
built-in rules, whichever layer redefines the formula); one that only a later layer defines is
refused. Checked once per load, after every formula is compiled, from the named formulas each
formula uses directly (`Formula.refers`, `FormulaLibrary.refers`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import fields
from functools import partial
from typing import Protocol

from parplan_gen.inputs.errors import RuleError, SourceRef
from parplan_gen.rules.formula_runtime import Formula
from parplan_gen.rules.formulas import FormulaLibrary, TextTemplate
from parplan_gen.rules.layers import Collector, Merged, RuleOrigin, attempt


class UndeclaredUseError(RuleError):
    """A formula uses a named formula of another rule file that its file does not declare."""


class Compiled(Protocol):
    """A compiled rule or estimate figure (`ruleset.Compiled*`, `ruleset.EstimateFormula`): a
    dataclass whose fields hold its formulas."""

    @property
    def origin(self) -> RuleOrigin:
        """Where it was defined, and in which layer."""


def check_uses(
    merged: Merged,
    library: FormulaLibrary,
    compiled: Iterable[Compiled],
    collect: Collector | None = None,
) -> None:
    """Refuse every use of a named formula of another file of the same layer that the using
    file's `uses:` does not list, and every use of one that only a later layer defines: in the
    named formulas of `library` and in the `compiled` rules and figures."""
    order = {layer: rank for rank, layer in enumerate(merged.layers)}
    check = partial(_check, merged, order, collect)
    known = set(library.names)
    for name, (_, origin) in merged.formulas.items():
        if name in known:  # `rules check` leaves out the named formulas that have errors
            check(origin.layer, origin.where, library.refers(name))
    for one in compiled:
        for formula in _formulas(one):
            check(one.origin.layer, formula.where, formula.refers)


def _formulas(compiled: object) -> Iterator[Formula]:
    """The formulas of a compiled rule or estimate figure: its fields, settings, placeholders."""
    for item in fields(compiled):  # type: ignore[arg-type]
        value = getattr(compiled, item.name)
        values = value.values() if isinstance(value, dict) else [value]
        for one in values:
            if isinstance(one, Formula):
                yield one
            elif isinstance(one, TextTemplate):
                yield from one.formulas


def _check(
    merged: Merged,
    order: dict[str, int],
    collect: Collector | None,
    layer: str,
    where: SourceRef,
    refers: tuple[str, ...],
) -> None:
    for name in refers:
        attempt(collect, partial(_check_one, merged, order, layer, where, name))


def _check_one(
    merged: Merged, order: dict[str, int], layer: str, where: SourceRef, name: str
) -> None:
    definitions = merged.definitions[name]
    if order[definitions[0].layer] < order[layer]:
        return  # an earlier layer's named formula
    own = next((d for d in definitions if d.layer == layer), None)
    if own is None:
        raise UndeclaredUseError(
            f"uses '{name}', which only a later layer defines ({definitions[0].where}); a "
            "formula may use the named formulas of its own layer and of the layers before it",
            where,
        )
    if own.where.file == where.file:
        return
    user, used = merged.files[(layer, where.file)], merged.files[(layer, own.where.file)]
    if used.name not in user.uses:
        fix = f"add '{used.name}' to it" if user.uses else f"write `uses: [{used.name}]`"
        raise UndeclaredUseError(
            f"uses '{name}', a named formula of the rule file '{used.name}' (line "
            f"{own.where.line}), which this file's `uses:` does not list: {fix}",
            where,
        )
