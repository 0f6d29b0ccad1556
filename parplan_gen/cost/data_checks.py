"""The strict base of the data files' models (`RawData`), the sources every catalog figure
names (`Sourced`), and the physical range of each figure (`ranges:` in
`parplan_gen/data/gpus.yaml` and `networks.yaml`): read, and checked against a figure, for the
catalog (`catalog.load_catalog`) and for a cluster file's `overrides:`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat

from parplan_gen.inputs.errors import InputError, shown_value
from parplan_gen.inputs.key_path import KeyPath
from parplan_gen.inputs.source import Document


class RawData(BaseModel):
    """Data as written in YAML: strict types, no unknown keys, no NaN/inf."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class Sourced(RawData):
    """A catalog entry whose every figure names where it comes from."""

    sources: dict[str, str] = Field(description="Figure key -> where the figure comes from.")
    unverified: list[str] = Field([], description="Figures not re-checked against a primary.")


class FigureRange(RawData):
    """The physical range of one figure (`ranges:` in the data files), in catalog units."""

    min: PositiveFloat
    max: PositiveFloat
    source: str = Field(min_length=1, description="Where the ends come from.")


@dataclass(frozen=True)
class Bounds:
    """A figure's physical range and the data file entry that gives it (with its source)."""

    low: float
    high: float
    origin: str  # `parplan_gen/data/gpus.yaml ranges.memory_gib`

    def problem(self, value: float) -> str | None:
        """Why `value` is not a physical value of the figure, or None."""
        if self.low <= value <= self.high:
            return None
        return (
            f"{shown_value(value)} is outside the physical range {self.low:g} to {self.high:g} "
            f"({self.origin})"
        )


def read_ranges(
    doc: Document, ranges: dict[str, FigureRange], keys: tuple[str, ...]
) -> dict[str, Bounds]:
    """The `ranges:` of a data file, which must give exactly `keys`, each with min <= max."""
    missing, unknown = sorted(set(keys) - set(ranges)), sorted(set(ranges) - set(keys))
    if missing or unknown:
        raise InputError(
            f"ranges must give exactly {', '.join(keys)} (missing: {', '.join(missing) or '-'}; "
            f"unknown: {', '.join(unknown) or '-'})",
            doc.ref(("ranges",)),
        )
    bounds = {}
    for key, r in ranges.items():
        if r.min > r.max:
            raise InputError(f"min({r.min:g}) > max({r.max:g})", doc.ref(("ranges", key)))
        bounds[key] = Bounds(r.min, r.max, f"{doc.name} ranges.{key}")
    return bounds


def check_ranges(
    ranges: Mapping[str, Bounds], figures: Mapping[str, float | None], doc: Document, path: KeyPath
) -> None:
    """An InputError at `path.key` in `doc` for the first of `figures` (key -> value in catalog
    units; None: not given) outside its physical range."""
    for key, value in figures.items():
        problem = None if value is None else ranges[key].problem(value)
        if problem:
            raise InputError(problem, doc.ref((*path, key)))


def check_sources(doc: Document, path: KeyPath, entry: Sourced, keys: tuple[str, ...]) -> None:
    """Every figure names a source; `sources` and `unverified` name only figures."""
    for key in keys:
        if not entry.sources.get(key, "").strip():
            raise InputError(f"figure '{key}' names no source", doc.ref((*path, "sources")))
    for group, named in (("sources", list(entry.sources)), ("unverified", entry.unverified)):
        for key in named:
            if key not in keys:
                where = doc.ref((*path, group))
                raise InputError(f"'{key}' is not a figure (figures: {', '.join(keys)})", where)
