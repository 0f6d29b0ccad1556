"""The training budget's inputs (`plan --tokens`): the price of a GPU-hour, the MTBF per GPU and
the checkpoint storage bandwidth (`BudgetInputs`, what a cluster file gives; only the budget,
planning/budget.py, reads them), and the one check each figure passes wherever it enters.

The ranges are data (`parplan_gen/data/budget_ranges.yaml`, each with its reason). The same
`budget_figure_problem` refuses a figure given in a cluster file, by `--gpu-hour-price`, to
`parplan_gen.plan(gpu_hour_price=...)` or `plan(budget_inputs=...)`, in a plan.json, or as a
default of rules/budget/budget.yaml: a number that is not a finite real number (a bool, a text,
NaN, infinity) or that lies outside its range.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

from parplan_gen.cost.data_checks import Bounds, FigureRange, RawData, read_ranges
from parplan_gen.inputs.errors import shown_value
from parplan_gen.inputs.source import read_package_data
from parplan_gen.inputs.validation import validate

DATA_FILE = "budget_ranges.yaml"
BUDGET_KEYS = ("gpu_hour_price", "mtbf_gpu_hours", "storage_gb_per_s")  # cluster file keys


class _File(RawData):
    ranges: dict[str, FigureRange]


@cache
def budget_ranges() -> dict[str, Bounds]:
    """Each budget figure's range, read and checked once per process."""
    doc = read_package_data(DATA_FILE)
    return read_ranges(doc, validate(_File, doc.data, doc).ranges, BUDGET_KEYS)


def budget_figure_problem(key: str, value: object) -> str | None:
    """Why `value` cannot be the budget figure `key` (one of BUDGET_KEYS), or None."""
    bounds = budget_ranges()[key]
    # NaN and infinity compare False; an int of any size compares exactly (no float overflow)
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and bounds.low <= value <= bounds.high
    ):
        return None
    return f"expected {_wanted(key)}, got {shown_value(value)}"


def _wanted(key: str) -> str:
    bounds = budget_ranges()[key]
    return f"a number from {bounds.low:g} to {bounds.high:g} ({bounds.origin})"


def _checked(key: str) -> AfterValidator:
    def check(value: float) -> float:
        if budget_figure_problem(key, value):  # pydantic adds "(got VALUE)"
            raise PydanticCustomError("budget_range", f"expected {_wanted(key)}")
        return value

    return AfterValidator(check)


# The fields of a cluster file and of `BudgetInputs` (strict: `true` or "2.5" is not a price).
GpuHourPrice = Annotated[float, Field(strict=True), _checked("gpu_hour_price")]
MtbfGpuHours = Annotated[float, Field(strict=True), _checked("mtbf_gpu_hours")]
StorageGbPerS = Annotated[float, Field(strict=True), _checked("storage_gb_per_s")]


class BudgetInputs(BaseModel):
    """The budget figures a site gives (a cluster file's `gpu_hour_price`, `mtbf_gpu_hours`,
    `storage_gb_per_s`; `plan(budget_inputs=...)`; plan.json `budget_inputs`); each None when
    not given: the budget then takes the default rule of rules/budget/budget.yaml (no price: no
    cost)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_hour_price: GpuHourPrice | None = Field(None, description="Price of one GPU-hour.")
    mtbf_gpu_hours: MtbfGpuHours | None = Field(None, description="MTBF per GPU, GPU-hours.")
    storage_gb_per_s: StorageGbPerS | None = Field(None, description="Checkpoint write GB/s.")

    @property
    def empty(self) -> bool:
        return all(getattr(self, key) is None for key in BUDGET_KEYS)
