"""Validation rows: published runs kept apart from the calibration files and never fitted on
(benchmarks/data/validation_runs.yaml, `purpose: validation`). `calibration.py --validate`
predicts them with the shipped constants and reports the error per family; `--fit` and
`--cross-validate` refuse a file that says it holds validation rows."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

from calibration_cv import mean_abs_text
from calibration_read import Case
from ruamel.yaml import YAML

VALIDATION_RUNS = Path(__file__).resolve().parent / "data" / "validation_runs.yaml"
VALIDATION_PURPOSE = "validation"


def is_validation_file(path: Path) -> bool:
    """Whether a runs file declares `purpose: validation` (rows that must never be fitted on)."""
    data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
    return isinstance(data, dict) and data.get("purpose") == VALIDATION_PURPOSE


def validation_files(paths: Iterable[Path]) -> list[Path]:
    """The files among `paths` that hold validation rows."""
    return [p for p in paths if is_validation_file(p)]


class _Evaluated(Protocol):
    """What the table reads of a calibration.Row."""

    @property
    def case(self) -> Case: ...
    @property
    def fits(self) -> bool: ...
    @property
    def error_pct(self) -> float: ...
    @property
    def memory_error_pct(self) -> float | None: ...


def family_table(rows: Sequence[_Evaluated], order: Sequence[str]) -> str:
    """Per family (those of `order` first, then any other a row names), the runs, the mean
    |error| of TFLOP/s per GPU and of peak memory (rows that publish it) and the runs predicted
    to fit (`rows`: calibration.Row)."""
    measured = [r for r in rows if r.case.measured]
    named = {f for r in measured for f in r.case.families}
    families = [f for f in order if f in named] + sorted(named - set(order))
    head = f"{'family':<24} {'runs':>4} {'error':>8} {'memory':>8} {'fit':>7}"
    lines = [head, "-" * len(head)]
    for family in (*families, "all"):
        members = [r for r in measured if family == "all" or family in r.case.families]
        memory = [r.memory_error_pct for r in members if r.memory_error_pct is not None]
        fitting = sum(r.fits for r in members)
        lines.append(
            f"{family:<24} {len(members):>4} {mean_abs_text([r.error_pct for r in members]):>8} "
            f"{mean_abs_text(memory):>8} {fitting:>3}/{len(members):<3}"
        )
    return "\n".join(lines) + "\n"


__all__ = ["VALIDATION_RUNS", "family_table", "is_validation_file", "validation_files"]
