"""Which MFU a plan's views show: the count its backend's own log uses
(`parplan_gen/data/mfu_conventions.yaml`).

An estimate carries two counts of the model FLOPs (rules/cost/throughput.yaml): the whole s x s
attention-score matrix (`mfu`, `model_tflops_per_gpu`) and its causal half (`mfu_causal`,
`model_tflops_causal_per_gpu`). Megatron-LM logs the causal count, torchtitan the whole one;
`headline` gives the figure of the estimate's backend's count and says which, so a plan's
MFU is the one its user's logs will show. `convention_of` reads and checks the shipped file
once per process; a backend it does not list (or a layout without one) takes its `default`. An
estimate whose two counts agree (an op-graph model: no attention scores) has nothing to say
about the count (`SAME`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Literal

from pydantic import Field

from parplan_gen.cost.data_checks import RawData
from parplan_gen.cost.estimate import Estimate, Throughput
from parplan_gen.inputs.errors import InputError
from parplan_gen.inputs.source import read_package_data
from parplan_gen.inputs.validation import validate
from parplan_gen.models.kind import BACKEND_NAMES

DATA_FILE = "mfu_conventions.yaml"
Attention = Literal["causal", "full"]


class _Convention(RawData):
    attention: Attention = Field(description="The attention scores counted: causal half, or all.")
    says: str = Field(min_length=1, description="Shown after the figure, in parentheses.")
    source: str = Field(min_length=1)


class _File(RawData):
    default: _Convention
    backends: dict[str, _Convention]


@dataclass(frozen=True)
class MfuConvention:
    """One count of the model FLOPs: which attention scores, how the views say it (empty: the
    counts agree, nothing to say), the source."""

    attention: Attention
    says: str
    source: str

    @property
    def short(self) -> str:
        """`causal` or `full`, as a table header names the count (empty when the counts
        agree)."""
        return self.attention if self.says else ""

    @property
    def header(self) -> str:
        """A table column's name: `MFU (causal)`, or `MFU` when the counts agree."""
        return f"MFU ({self.short})" if self.short else "MFU"

    def mfu(self, throughput: Throughput) -> float:
        """The MFU in this count (the causal figure is present: `convention_of` checks it)."""
        if self.attention == "causal" and throughput.mfu_causal is not None:
            return throughput.mfu_causal
        return throughput.mfu

    def model_tflops(self, throughput: Throughput) -> float:
        """The model TFLOP/s per GPU in this count."""
        causal = throughput.model_tflops_causal_per_gpu
        if self.attention == "causal" and causal is not None:
            return causal
        return throughput.model_tflops_per_gpu


@dataclass(frozen=True)
class _Conventions:
    default: MfuConvention
    backends: dict[str, MfuConvention]


@cache
def _load() -> _Conventions:
    doc = read_package_data(DATA_FILE)
    data = validate(_File, doc.data, doc)
    for name in data.backends:
        if name not in BACKEND_NAMES:
            known = ", ".join(BACKEND_NAMES)
            raise InputError(f"'{name}' is no backend (backends: {known})", doc.ref(("backends",)))

    def made(c: _Convention) -> MfuConvention:
        return MfuConvention(c.attention, " ".join(c.says.split()), " ".join(c.source.split()))

    return _Conventions(made(data.default), {name: made(c) for name, c in data.backends.items()})


def backend_convention(backend: str | None) -> MfuConvention:
    """The count `backend`'s log uses (the file's default for None or a backend not listed)."""
    found = _load()
    return found.backends.get(backend or "", found.default)


def default_convention() -> MfuConvention:
    """The count shown where no backend's applies: the whole score matrix."""
    return _load().default


# The two counts agree (no attention scores): the figure needs no words.
SAME = MfuConvention("full", "", "rules/cost/graph.yaml: an op graph's one count")


def convention_of(estimate: Estimate) -> MfuConvention:
    """The count the views show for `estimate`: its backend's, or the default when it has no
    backend or carries no causal figure (a plan.json written before estimates did); SAME when
    its two counts agree."""
    th = estimate.throughput
    if th.mfu_causal is not None and th.mfu_causal == th.mfu:
        return SAME
    found = backend_convention(estimate.backend.name if estimate.backend else None)
    if found.attention == "causal" and th.mfu_causal is None:
        return default_convention()
    return found


def headline(estimate: Estimate) -> tuple[float, MfuConvention]:
    """The estimate's MFU in the count its backend logs, and that count."""
    found = convention_of(estimate)
    return found.mfu(estimate.throughput), found


def mfu_text(estimate: Estimate) -> str:
    """`46.6% (causal, as Megatron-LM counts it)`: the headline MFU and its count (the figure
    alone when the counts agree)."""
    value, found = headline(estimate)
    return f"{value:.1%} ({found.says})" if found.says else f"{value:.1%}"
