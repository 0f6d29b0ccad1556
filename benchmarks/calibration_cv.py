"""The cross-validation report: per family, the in-sample MAPE (constants fitted on every
measured row), the leave-one-source-out MAPE (each row predicted by the constants fitted
without its publication), the peak-memory error of the rows that publish it, and the fraction
of the runs that ran predicted to fit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from calibration_fit import FastThroughput, Fold, error_pct
from calibration_read import Case


def mean_abs_text(values: Sequence[float]) -> str:
    """The mean |value| as a table cell (' -  ' when there is none)."""
    return f"{sum(abs(v) for v in values) / len(values):5.1f} %" if values else "    -  "


def loso_errors(fast: FastThroughput, folds: Sequence[Fold]) -> dict[int, float]:
    """Each measured row's error % predicted by the fold that left its publication out."""
    out: dict[int, float] = {}
    for fold in folds:
        predicted = fast.predict(fold.constants)
        out |= {i: error_pct(predicted[i], fast.cases[i]) for i in fold.held_out}
    return out


def cross_validation_report(
    fast: FastThroughput,
    full: Mapping[str, float],
    folds: Sequence[Fold],
    rows: Sequence[Any],
    families: Sequence[str],
) -> str:
    """The per-family table, the per-row errors and each fold's constants, as text. `rows`
    are calibration.Row objects evaluated with `full` (fits and memory)."""
    cases: list[Case] = fast.cases
    predicted = fast.predict(full)
    in_sample = {i: error_pct(predicted[i], c) for i, c in enumerate(cases) if c.measured}
    loso = loso_errors(fast, folds)
    head = f"{'family':<24} {'runs':>4} {'in-sample':>10} {'LOSO':>8} {'memory':>8} {'fit':>7}"
    lines = [head, "-" * len(head)]
    for family in (*families, "all"):
        members = [i for i, c in enumerate(cases) if family == "all" or family in c.families]
        measured = [i for i in members if cases[i].measured]
        memory = [rows[i].memory_error_pct for i in members if rows[i].memory_error_pct is not None]
        fitting = sum(rows[i].fits for i in measured)
        lines.append(
            f"{family:<24} {len(measured):>4} {mean_abs_text([in_sample[i] for i in measured]):>10} "
            f"{mean_abs_text([loso[i] for i in measured if i in loso]):>8} {mean_abs_text(memory):>8} "
            f"{fitting:>3}/{len(measured):<3}"
        )
    lines += ["", "in-sample / LOSO MAPE of TFLOP/s per GPU; memory: mean |error| of the"]
    lines += ["published peak memory; fit: runs that ran predicted to fit.", ""]
    width = max(len(c.name) for c in cases)
    lines.append(f"{'run':<{width}} {'source':<16} {'in-sample':>9} {'LOSO':>8}")
    for i, case in enumerate(cases):
        if case.measured:
            lines.append(
                f"{case.name:<{width}} {case.source:<16} {in_sample[i]:+8.1f}% {loso[i]:+7.1f}%"
            )
    lines += ["", "constants: all rows " + _constants(full)]
    lines += [f"  without {f.source}: {_constants(f.constants)}" for f in folds]
    return "\n".join(lines) + "\n"


def _constants(constants: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in constants.items())
